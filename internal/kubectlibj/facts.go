package kubectlibj

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// podFacts is what the plugin keeps of one pod of the job: only the latest
// pod of each index is kept, so that a job of 100,000 indexes is read a
// page of pods at a time without holding the pods. Its jobpod.Pod is what
// the operator reads of the pod, read by the same code; the rest is what
// only the plugin shows.
type podFacts struct {
	*jobpod.Pod
	node string
	// started is status.startTime; finished, for a pod that reached
	// Succeeded or Failed, is when it ended as the operator reckons it
	// (jobpod.FinishTime: its backoff runs from there). Zero when unknown.
	started  time.Time
	finished time.Time
	// exit is the container exit shown for the pod, nil while none ended.
	exit *containerEnd
	// disruption is the reason of a True DisruptionTarget condition.
	disruption string
	// podReason and message are status.reason and status.message.
	podReason, message string
	// waiting says why a pod that is not running yet has not started.
	waiting string
	// memory is the memory annotation, "" without one (the operator's
	// cache leaves it out: no sync reads it).
	memory string
	// failure is how the pod's end counts, as the operator decides it; its
	// Match is the podFailurePolicy rule that matched, if any.
	failure jobpod.Failure
}

// containerEnd is one terminated container.
type containerEnd struct {
	container string
	code      int32
	reason    string
}

// newPodFacts reads a pod of the job; ok is false for a pod without a
// readable completion index.
func newPodFacts(job *ibjv1.IndexedBatchJob, pod *corev1.Pod) (f *podFacts, ok bool) {
	p := jobpod.Read(pod)
	if !p.IndexOK {
		return nil, false
	}
	f = &podFacts{
		Pod:       p,
		node:      pod.Spec.NodeName,
		podReason: pod.Status.Reason,
		message:   pod.Status.Message,
		memory:    pod.Annotations[ibjv1.MemoryAnnotation],
	}
	if p.Finished() {
		f.finished = p.FinishedAt
	}
	if pod.Status.StartTime != nil {
		f.started = pod.Status.StartTime.Time
	}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			f.disruption = c.Reason
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			f.waiting = c.Reason
		}
	}
	f.failure = jobpod.Classify(job, p)
	f.exit = shownExit(f, containerEnds(pod))
	if f.waiting == "" && f.Phase == corev1.PodPending {
		f.waiting = waitingReason(pod)
	}
	return f, true
}

// containerEnds lists the terminated containers, init containers first, in
// the order the pod's status lists them.
func containerEnds(pod *corev1.Pod) []containerEnd {
	var ends []containerEnd
	statuses := append(append([]corev1.ContainerStatus(nil), pod.Status.InitContainerStatuses...), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		if t := cs.State.Terminated; t != nil {
			ends = append(ends, containerEnd{container: cs.Name, code: t.ExitCode, reason: t.Reason})
		}
	}
	return ends
}

// shownExit picks the exit that explains the pod's end: the container the
// matched rule names, else the first that failed, else the last container
// to end (for a pod that succeeded).
func shownExit(f *podFacts, ends []containerEnd) *containerEnd {
	if m := f.failure.Match; m != nil && m.Exit != nil {
		for i, e := range ends {
			if e.container == m.Exit.Container && e.code == m.Exit.Code {
				return &ends[i]
			}
		}
	}
	for i := range ends {
		if ends[i].code != 0 {
			return &ends[i]
		}
	}
	if len(ends) > 0 && f.Phase == corev1.PodSucceeded {
		return &ends[len(ends)-1]
	}
	return nil
}

// waitingReason is the reason of the first container that waits, such as
// ContainerCreating or ImagePullBackOff.
func waitingReason(pod *corev1.Pod) string {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range list {
			if w := cs.State.Waiting; w != nil && w.Reason != "" {
				return w.Reason
			}
		}
	}
	return ""
}

// deleting: the pod has a deletion timestamp.
func (f *podFacts) deleting() bool { return f.DeletionTimestamp != nil }

// newer tells whether f is a later pod of its index than g: a higher
// attempt, or the same attempt created later (a name reused once every pod
// of the index was gone).
func (f *podFacts) newer(g *podFacts) bool {
	if f.Attempt != g.Attempt {
		return f.Attempt > g.Attempt
	}
	return f.CreationTimestamp.After(g.CreationTimestamp.Time)
}
