package controller

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// plan is everything one sync decided. The reconciler applies it in order:
// deletes and creates, then the status (if changed), then finalizer removals
// (only once the status holding their result is written), then events.
// raisedPod is a pod created with more memory than the template's, and
// what its MemoryRaised event says.
type raisedPod struct{ pod, message string }

type plan struct {
	status          ibjv1.IndexedBatchJobStatus
	create          []podbuild.Spec
	delete          []podDeletion
	removeFinalizer []*jobpod.Pod
	// discard are pods whose finalizer goes without their end being counted.
	discard []*jobpod.Pod
	// failStuck are pods still terminating past the job's
	// terminatingTimeoutSeconds, whose status is to be written Failed.
	failStuck []*jobpod.Pod
	// countHeld are pods heldForRetry whose tracking finalizer goes (their
	// failure is then counted) while their index-retry finalizer stays.
	countHeld []*jobpod.Pod
	// releaseLater are pods whose finalizer goes off the critical path, once
	// the status is written: the results they hold are counted already.
	releaseLater []*jobpod.Pod
	events       []event
	// indexFailures say why each index the sync failed for good did; they
	// are reported as paced IndexFailed events (event_pace.go).
	indexFailures []string
	// memoryRaised and memoryHeldBack name the pods this sync creates with
	// memory raised after OOM kills, and those whose raise Kueue's quota
	// held back; they are reported as paced MemoryRaised and
	// MemoryRaiseHeldBack events (event_pace.go).
	memoryRaised   []raisedPod
	memoryHeldBack []string
	recorded       []finishedPod
	// failuresNoted is how many attempts the sync added to the job's
	// failure record, to be written once the status is; nodesAvoided
	// the nodes it made avoided by the whole job, for the metric.
	failuresNoted int
	nodesAvoided  []string
	// newlyFinished is the terminal condition reached in this sync, if any.
	newlyFinished *metav1.Condition
	// newlyCompleted and newlyFailedIndexes are how many indexes this sync
	// added to completedIndexes and failedIndexes, for metrics.
	newlyCompleted, newlyFailedIndexes int
	deleteJob                          bool
	// settle are the settled pods (syncState.settles) the pod cache may
	// keep out of the job's next syncs; settleReleased too, once the
	// status is written and their finalizers are queued (releaseLater).
	settle, settleReleased []*jobpod.Pod
	// needAllPods: the sync could not decide without the settled pods;
	// it is to be made again with every pod of the job, and nothing else
	// of this plan holds.
	needAllPods  bool
	requeueAfter time.Duration
	// holdStatus, when above zero, says the status moved only counters
	// (onlyCountersMoved) within statusCounterInterval of the job's last
	// status write: apply writes it only if something else changed by
	// then, and otherwise syncs again in holdStatus.
	holdStatus time.Duration
	// holdStart is the startTime of a first status held back
	// (firstStatusOnly), for the next syncs to keep; zero otherwise.
	holdStart time.Time
}

// event is a Kubernetes event the reconciler emits once the status is
// written; eventType is corev1.EventTypeNormal or EventTypeWarning.
type event struct {
	eventType string
	reason    string
	message   string
}

// podDeletion is a pod to delete. stripFinalizer removes the tracking
// finalizer first, so the pod's end is never counted (suspend, excess pods,
// lingering pods after success, pods with an invalid index).
type podDeletion struct {
	pod            *jobpod.Pod
	stripFinalizer bool
	reason         string
	// event, if set, is emitted once the pod is deleted, whatever the rest
	// of the sync's writes do: the pod it names is gone, and the next sync
	// will not see it to say so again.
	event *event
}

// finishedPod is a pod whose result this sync records, for metrics.
type finishedPod struct {
	index     int32
	succeeded bool
}

// requeue asks for another sync after d at the latest.
func (p *plan) requeue(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if p.requeueAfter == 0 || d < p.requeueAfter {
		p.requeueAfter = d
	}
}

// inform adds a Normal event.
func (p *plan) inform(reason, format string, args ...any) {
	p.events = append(p.events, normalEvent(reason, format, args...))
}

// warn adds a Warning event.
func (p *plan) warn(reason, format string, args ...any) {
	p.events = append(p.events, warningEvent(reason, format, args...))
}

func normalEvent(reason, format string, args ...any) event {
	return event{eventType: corev1.EventTypeNormal, reason: reason, message: fmt.Sprintf(format, args...)}
}

func warningEvent(reason, format string, args ...any) event {
	return event{eventType: corev1.EventTypeWarning, reason: reason, message: fmt.Sprintf(format, args...)}
}

// finishedEvent announces the terminal condition c.
func finishedEvent(c *metav1.Condition) event {
	if c.Type == ibjv1.ConditionComplete {
		return event{eventType: corev1.EventTypeNormal, reason: "Completed", message: c.Message}
	}
	return event{eventType: corev1.EventTypeWarning, reason: c.Reason, message: c.Message}
}
