package kubectlibj

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// podFacts is what the plugin keeps of one pod of the job: only the latest
// pod of each index is kept, so that a job of 100,000 indexes is read a
// page of pods at a time without holding the pods.
type podFacts struct {
	name    string
	index   int32
	attempt int32
	// failures and ignored are the index-failure-count annotations: the
	// earlier pods of the index whose failure counted, or an Ignore rule
	// matched.
	failures, ignored int32
	created           time.Time
	phase             corev1.PodPhase
	deleting          bool
	// deletedAt is when the deletion was asked for (the deletion timestamp
	// less the grace period).
	deletedAt time.Time
	// discarded: the operator let go of the pod without counting its end
	// (suspend, or the job's success).
	discarded bool
	node      string
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
	index, ok := jobpod.Index(pod)
	if !ok {
		return nil, false
	}
	f = &podFacts{
		name:     pod.Name,
		index:    index,
		attempt:  jobpod.Count(pod.Annotations, ibjv1.AttemptAnnotation),
		failures: jobpod.Count(pod.Annotations, ibjv1.IndexFailureCountAnnotation),
		ignored:  jobpod.Count(pod.Annotations, ibjv1.IndexIgnoredFailureCountAnnotation),
		created:  pod.CreationTimestamp.Time,
		phase:    pod.Status.Phase,
		node:     pod.Spec.NodeName,

		podReason: pod.Status.Reason,
		message:   pod.Status.Message,
	}
	if f.isFinished() {
		f.finished = jobpod.FinishTime(pod)
	}
	_, f.discarded = pod.Annotations[discardedAnnotation]
	if pod.DeletionTimestamp != nil {
		f.deleting = true
		grace := time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second
		f.deletedAt = pod.DeletionTimestamp.Add(-grace)
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
	f.failure = jobpod.Classify(job, jobpod.Ended{
		Namespace: pod.Namespace, Name: pod.Name, Phase: f.phase, Deleting: f.deleting, Discarded: f.discarded,
		Failures: f.failures, Exits: jobpod.Exits(pod), Conditions: jobpod.Conditions(pod),
	})
	f.exit = shownExit(f, containerEnds(pod))
	if f.waiting == "" && f.phase == corev1.PodPending {
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
	if len(ends) > 0 && f.phase == corev1.PodSucceeded {
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

// discardedAnnotation marks a pod the operator let go of without counting
// its end. The operator writes it (internal/controller's
// discardedAnnotation); the plugin only reads it.
const discardedAnnotation = "batch.indexedjob.dev/discarded"

// isFinished: the pod reached Succeeded or Failed.
func (f *podFacts) isFinished() bool {
	return f.phase == corev1.PodSucceeded || f.phase == corev1.PodFailed
}

// newer tells whether f is a later pod of its index than g: a higher
// attempt, or the same attempt created later (a name reused once every pod
// of the index was gone).
func (f *podFacts) newer(g *podFacts) bool {
	if f.attempt != g.attempt {
		return f.attempt > g.attempt
	}
	return f.created.After(g.created)
}
