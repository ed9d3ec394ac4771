package jobpod

import (
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Pod is what the controller keeps of one of its pods, and what the kubectl
// plugin reads of one: the few facts a sync reads, taken from the pod when
// its watch event arrives. A decoded
// Pod is large even without its spec (the Pod struct itself, and a map for
// each of its labels and annotations); this is a small fraction of it, and
// the pod cache is most of the operator's memory for a large job
// (docs/bench has the measured figures).
type Pod struct {
	// Meta holds the name, namespace, UID, resourceVersion, creation
	// and deletion timestamps and the deletion grace period, nothing more.
	Meta

	JobName  string    // the job-name label, "" when missing
	OwnerUID types.UID // UID of the controlling IndexedBatchJob, "" without one
	UIDLabel types.UID // the controller-uid label, "" when missing
	// Index is the completion Index from the label (else the annotation);
	// badIndex, when the Index is missing or malformed, is the label as
	// written, for the event that reports it.
	Index    int32
	IndexOK  bool
	BadIndex string
	Attempt  int32
	Failures int32 // the index-failure-count annotation
	Ignored  int32 // the index-ignored-failure-count annotation
	OOMKills int32 // the oom-kills annotation

	Phase corev1.PodPhase
	// NodeName is the node the pod is bound to, "" while it has none: the
	// node a failure is recorded against (spec.nodeAvoidance).
	NodeName string
	// Reason is the pod's status reason (Evicted, DeadlineExceeded, ...),
	// kept only for pods not Succeeded.
	Reason string
	// Unschedulable is the scheduler's message while the pod's
	// PodScheduled condition is False with reason Unschedulable.
	Unschedulable string
	Tracked       bool // carries the tracking finalizer
	// Held: carries the index-retry finalizer (its failure may be counted
	// already; it stays as its index's record until the next pod exists).
	Held      bool
	Discarded bool // its finalizer was removed without counting its end
	Ready     bool
	Restarts  int32 // container restarts, init containers included
	// InPlace is the restarts of the pod's containers, init containers
	// not included. In a pod with restartPolicy Never only container
	// restart rules restart a container: each such restart is a failure
	// retried in place (podFailurePolicy retry InPlace).
	InPlace int32
	// Generation is the restart-attempt label: how many times the job's
	// pods had been restarted together when this one was created.
	Generation int32
	// FinishedAt is when the pod finished, for backoff (see FinishTime).
	FinishedAt time.Time
	// Exits are the terminated containers with a non-zero exit code, init
	// containers first, and conditions the pod's conditions: what a
	// podFailurePolicy rule matches. Kept only for pods not Succeeded.
	Exits      []Exit
	Conditions []Condition
}

// Read takes the facts of a pod. The pods of a job share one copy of the
// strings they have in common (namespace, job name, owner UID, phase).
func Read(pod *corev1.Pod) *Pod {
	c := &Pod{
		Meta: Meta{
			Name:                       pod.Name,
			Namespace:                  intern(pod.Namespace),
			UID:                        pod.UID,
			ResourceVersion:            pod.ResourceVersion,
			CreationTimestamp:          pod.CreationTimestamp,
			DeletionTimestamp:          pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		},
		JobName:  intern(pod.Labels[ibjv1.JobNameLabel]),
		Attempt:  Count(pod.Annotations, ibjv1.AttemptAnnotation),
		Failures: Count(pod.Annotations, ibjv1.IndexFailureCountAnnotation),
		Ignored:  Count(pod.Annotations, ibjv1.IndexIgnoredFailureCountAnnotation),
		OOMKills: Count(pod.Annotations, ibjv1.OOMKillsAnnotation),
		// Count reads a label as it reads an annotation.
		Generation: Count(pod.Labels, ibjv1.RestartAttemptLabel),
		Phase:      internPhase(pod.Status.Phase),
		NodeName:   intern(pod.Spec.NodeName),
	}
	if _, ok := pod.Annotations[ibjv1.DiscardedAnnotation]; ok {
		c.Discarded = true
	}
	if ref := metav1.GetControllerOf(pod); isJobRef(ref) {
		c.OwnerUID = types.UID(intern(string(ref.UID)))
	}
	c.UIDLabel = types.UID(intern(pod.Labels[ibjv1.ControllerUIDLabel]))
	c.Index, c.IndexOK = Index(pod)
	if !c.IndexOK {
		c.BadIndex = pod.Labels[ibjv1.CompletionIndexLabel]
	}
	for _, f := range pod.Finalizers {
		switch f {
		case ibjv1.TrackingFinalizer:
			c.Tracked = true
		case ibjv1.IndexRetryFinalizer:
			c.Held = true
		}
	}
	for _, cond := range pod.Status.Conditions {
		switch {
		case cond.Type == corev1.PodReady:
			c.Ready = cond.Status == corev1.ConditionTrue
		case cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable:
			c.Unschedulable = cond.Message
		}
	}
	for _, cs := range pod.Status.InitContainerStatuses {
		c.Restarts += cs.RestartCount
	}
	for _, cs := range pod.Status.ContainerStatuses {
		c.Restarts += cs.RestartCount
		c.InPlace += cs.RestartCount - statusUnknownRestart(cs)
	}
	if c.Phase != corev1.PodSucceeded {
		c.Reason = intern(pod.Status.Reason)
		c.Exits = Exits(pod)
		c.Conditions = Conditions(pod)
	}
	c.FinishedAt = FinishTime(pod)
	return c
}

// containerStatusUnknown is the reason the kubelet gives a container it
// can no longer find once its pod is ended (an eviction, say).
const containerStatusUnknown = "ContainerStatusUnknown"

// statusUnknownRestart is 1 for a container the kubelet wrote terminated
// as ContainerStatusUnknown after it had been running: the kubelet counts
// that as a restart, though the container never ran again. A failure
// retried in place would otherwise be counted for it, beside the pod's own
// failure. The kubelet's first write of a lost container already counts
// the restart: its last termination ContainerStatusUnknown, waiting, before
// a later write ends it so.
func statusUnknownRestart(cs corev1.ContainerStatus) int32 {
	if cs.RestartCount == 0 {
		return 0
	}
	if t := cs.State.Terminated; t != nil && t.Reason == containerStatusUnknown {
		return 1
	}
	if l := cs.LastTerminationState.Terminated; l != nil && l.Reason == containerStatusUnknown && cs.State.Waiting != nil {
		return 1
	}
	return 0
}

// isJobRef: the controller reference names an IndexedBatchJob.
func isJobRef(ref *metav1.OwnerReference) bool {
	if ref == nil || ref.Kind != "IndexedBatchJob" {
		return false
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	return err == nil && gv.Group == ibjv1.GroupVersion.Group
}

// intern returns the canonical copy of s, so that the pods of one job
// (thousands of them) share one string for what they have in common (their
// namespace, job name and owner) instead of each keeping its decoder's copy.
func intern(s string) string { return unique.Make(s).Value() }

// internPhase returns the package constant for a known phase, so that
// thousands of cached pods share one string instead of each keeping the
// copy its decoder made.
func internPhase(p corev1.PodPhase) corev1.PodPhase {
	for _, known := range []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown} {
		if p == known {
			return known
		}
	}
	return p
}

// Finalized: the pod carries one of the operator's finalizers (tracking or
// index-retry), which someone must remove before the pod can go.
func (p *Pod) Finalized() bool { return p.Tracked || p.Held }

// Strayed: the pod carries one of the operator's finalizers but no longer
// belongs to a job: it has no IndexedBatchJob for its controller, or its
// labels no longer name the job that controls it (someone edited them).
// The operator lets such a pod go (its finalizers and its controller
// reference), as upstream's Job controller releases a pod that no longer
// matches its selector; the job runs the index again.
func (p *Pod) Strayed() bool {
	return p.Finalized() && (p.OwnerUID == "" || p.JobName == "" || p.UIDLabel != p.OwnerUID)
}

// Finished: the pod reached Succeeded or Failed.
func (p *Pod) Finished() bool {
	return p.Phase == corev1.PodSucceeded || p.Phase == corev1.PodFailed
}

// Terminating: deleted, and not finished yet.
func (p *Pod) Terminating() bool {
	return p.DeletionTimestamp != nil && !p.Finished()
}

// Active: pending or running, not terminating.
func (p *Pod) Active() bool {
	return p.DeletionTimestamp == nil && !p.Finished()
}
