package controller

import (
	"errors"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// The setters below each write one part of the status a sync computes; the
// decision core calls them with what its phases decided.

// setStartTime gives a job that is not suspended a startTime. As upstream, a
// job that is not suspended has started, whatever the sync decides: a job
// that finishes in the sync that starts or resumes it (completions 0, a
// failure seen on resume) still gets one.
func setStartTime(st *ibjv1.IndexedBatchJobStatus, job *ibjv1.IndexedBatchJob, now time.Time) {
	if st.StartTime == nil && !isSuspended(job) {
		st.StartTime = &metav1.Time{Time: now}
	}
}

// setSuspended sets condition Suspended and clears startTime: the deadline
// does not run while suspended, and a suspended job that never started may
// have its scheduling directives changed. It reports whether the job was
// not suspended before.
func setSuspended(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time) bool {
	st.StartTime = nil
	return setCondition(st, gen, now, ibjv1.ConditionSuspended, metav1.ConditionTrue, ibjv1.ReasonJobSuspended, "Job suspended")
}

// setResumed turns condition Suspended False and resets startTime, if the
// job was suspended; it reports whether it was.
func setResumed(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time) bool {
	if !isTrue(st, ibjv1.ConditionSuspended) {
		return false
	}
	setCondition(st, gen, now, ibjv1.ConditionSuspended, metav1.ConditionFalse, ibjv1.ReasonJobResumed, "Job resumed")
	st.StartTime = nil
	return true
}

// setFinished sets the terminal condition that follows target (Complete
// after SuccessCriteriaMet, with completionTime; Failed after
// FailureTarget), with the target's reason and message, and returns it.
func setFinished(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time, target *metav1.Condition) *metav1.Condition {
	final := ibjv1.ConditionFailed
	if target.Type == ibjv1.ConditionSuccessCriteriaMet {
		final = ibjv1.ConditionComplete
		st.CompletionTime = &metav1.Time{Time: now}
	}
	setCondition(st, gen, now, final, metav1.ConditionTrue, target.Reason, target.Message)
	return meta.FindStatusCondition(st.Conditions, final)
}

// setPodCounts sets the active, ready and terminating pod counts.
func setPodCounts(st *ibjv1.IndexedBatchJobStatus, active, ready, terminating int) {
	st.Active = int32(active)
	st.Ready = ptr.To(int32(ready))
	st.Terminating = ptr.To(int32(terminating))
}

// setIndexSets writes completedIndexes and, only for a job with
// backoffLimitPerIndex, failedIndexes, as compressed interval strings.
func setIndexSets(st *ibjv1.IndexedBatchJobStatus, job *ibjv1.IndexedBatchJob, completed, failed indexset.Set) {
	st.CompletedIndexes = completed.String()
	st.FailedIndexes = nil
	if job.Spec.BackoffLimitPerIndex != nil {
		st.FailedIndexes = ptr.To(failed.String())
	}
}

// setUncounted writes uncountedTerminatedPods: the recorded pods, sorted so
// that an unchanged set never looks like a change; nil when there are none.
func setUncounted(st *ibjv1.IndexedBatchJobStatus, succeeded, failed sets.Set[types.UID]) {
	st.UncountedTerminatedPods = nil
	if failed.Len()+succeeded.Len() > 0 {
		st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: listOrNil(succeeded), Failed: listOrNil(failed)}
	}
}

// listOrNil is the sorted set, nil when empty.
func listOrNil(uids sets.Set[types.UID]) []types.UID {
	if uids.Len() == 0 {
		return nil
	}
	return sets.List(uids)
}

// setSucceeded counts the completed indexes, as upstream counts the
// successes of an Indexed job: a second pod that succeeds for an index, or
// one of an index the job no longer runs, adds nothing.
func setSucceeded(st *ibjv1.IndexedBatchJobStatus, completed indexset.Set) {
	st.Succeeded = int32(completed.Len())
}

// setPeerDNSReady sets condition PeerDNSReady to what the reconciler found
// of the headless Service of job jobName (peerDNSCondition), and returns the
// condition if its status or reason changed, nil otherwise: a Service name
// taken after a failed create is a change worth an event, though the
// condition stays False.
func setPeerDNSReady(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time, jobName string, svc peerService) *metav1.Condition {
	return setChangedCondition(st, gen, now, peerDNSCondition(jobName, svc))
}

// setPodGroupReady sets condition PodGroupReady to what the reconciler
// found of the job's Workload and PodGroup (podGroupCondition), and returns
// the condition if its status or reason changed, nil otherwise.
func setPodGroupReady(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time, g podGroup) *metav1.Condition {
	return setChangedCondition(st, gen, now, podGroupCondition(g))
}

// setChangedCondition sets the condition want, and returns it if its
// status or reason changed (an event's worth), nil otherwise.
func setChangedCondition(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time, want metav1.Condition) *metav1.Condition {
	old := meta.FindStatusCondition(st.Conditions, want.Type)
	changed := old == nil || old.Status != want.Status || old.Reason != want.Reason
	setCondition(st, gen, now, want.Type, want.Status, want.Reason, want.Message)
	if !changed {
		return nil
	}
	return meta.FindStatusCondition(st.Conditions, want.Type)
}

// onlyCountersMoved reports whether next differs from prev, and only in
// what counts pods and finished indexes as they go: active, ready,
// terminating, succeeded and completedIndexes. Such a status may wait a
// moment for the next write (statusCounterInterval); anything else it
// holds (a condition, a failure, uncountedTerminatedPods, a startTime) is
// written at once, but for a job's first status (firstStatusOnly).
func onlyCountersMoved(prev, next *ibjv1.IndexedBatchJobStatus) bool {
	return countersMoved(prev, next) && equalButCounters(prev, next)
}

// firstStatusOnly: next is a job's first status, which gives it its
// startTime, its phase Running, its observedGeneration and counters, and
// nothing more.
func firstStatusOnly(prev, next *ibjv1.IndexedBatchJobStatus) bool {
	if prev.StartTime != nil || next.StartTime == nil {
		return false
	}
	a, b := *prev, *next
	for _, st := range []*ibjv1.IndexedBatchJobStatus{&a, &b} {
		st.StartTime, st.Phase, st.ObservedGeneration = nil, "", 0
	}
	return equalButCounters(&a, &b)
}

// countersMoved: a counter of the job's pods moved.
func countersMoved(prev, next *ibjv1.IndexedBatchJobStatus) bool {
	return prev.Active != next.Active || !ptr.Equal(prev.Ready, next.Ready) ||
		!ptr.Equal(prev.Terminating, next.Terminating) || prev.Succeeded != next.Succeeded ||
		prev.CompletedIndexes != next.CompletedIndexes
}

// equalButCounters: the statuses differ in their counters only, if at all.
func equalButCounters(prev, next *ibjv1.IndexedBatchJobStatus) bool {
	a, b := *prev, *next
	for _, st := range []*ibjv1.IndexedBatchJobStatus{&a, &b} {
		st.Active, st.Ready, st.Terminating, st.Succeeded, st.CompletedIndexes = 0, nil, nil, 0, ""
	}
	return equality.Semantic.DeepEqual(a, b)
}

// setPhase summarises the conditions for `kubectl get`.
func setPhase(st *ibjv1.IndexedBatchJobStatus) {
	switch {
	case isTrue(st, ibjv1.ConditionFailed):
		st.Phase = ibjv1.PhaseFailed
	case isTrue(st, ibjv1.ConditionComplete):
		st.Phase = ibjv1.PhaseComplete
	case isTrue(st, ibjv1.ConditionSuspended):
		st.Phase = ibjv1.PhaseSuspended
	case isTrue(st, ibjv1.ConditionPodCreationFailed):
		st.Phase = ibjv1.Phase(meta.FindStatusCondition(st.Conditions, ibjv1.ConditionPodCreationFailed).Reason)
	case meta.IsStatusConditionFalse(st.Conditions, ibjv1.ConditionPodGroupReady):
		st.Phase = ibjv1.Phase(meta.FindStatusCondition(st.Conditions, ibjv1.ConditionPodGroupReady).Reason)
	case st.StartTime != nil:
		st.Phase = ibjv1.PhaseRunning
	default:
		st.Phase = ibjv1.PhasePending
	}
}

// setPodCreation records how the sync's pod creates went: failure (the
// error of the lowest index whose create failed, nil if none failed) sets
// condition PodCreationFailed with the API server's message. The condition
// goes once a sync's creates all succeed (attempted, no failure), and when
// the job no longer creates pods (suspended, or its end decided): it says
// what stops the job now, not what stopped it once. A sync that creates
// nothing (waiting for a backoff, say) leaves it as it is. One exception:
// reason PodMutated stays while mutatedPacing (within a minute of the
// job's last mutated create), since the job's pace after a restart comes
// from it, and goes at the first sync after that minute.
func setPodCreation(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time, attempted, mutatedPacing bool, failure error) {
	ended := isTrue(st, ibjv1.ConditionSuspended) || currentTarget(st) != nil ||
		isTrue(st, ibjv1.ConditionComplete) || isTrue(st, ibjv1.ConditionFailed)
	switch {
	case failure != nil && !isTrue(st, ibjv1.ConditionSuspended) && currentTarget(st) == nil:
		reason, message := podCreationFailure(failure)
		setCondition(st, gen, now, ibjv1.ConditionPodCreationFailed, metav1.ConditionTrue, reason, message)
	case ended:
		meta.RemoveStatusCondition(&st.Conditions, ibjv1.ConditionPodCreationFailed)
	case podMutatedCondition(st):
		if !mutatedPacing {
			meta.RemoveStatusCondition(&st.Conditions, ibjv1.ConditionPodCreationFailed)
		}
	case attempted:
		meta.RemoveStatusCondition(&st.Conditions, ibjv1.ConditionPodCreationFailed)
	}
}

// podMutatedCondition: condition PodCreationFailed stands with reason
// PodMutated: the job's status says already that its creates come back
// mutated.
func podMutatedCondition(st *ibjv1.IndexedBatchJobStatus) bool {
	c := meta.FindStatusCondition(st.Conditions, ibjv1.ConditionPodCreationFailed)
	return c != nil && c.Status == metav1.ConditionTrue && c.Reason == ibjv1.ReasonPodMutated
}

// podCreationFailure is the reason and message of condition
// PodCreationFailed for a failed create: the API server's own message
// (which names the pod, the quota or the policy), and a reason from its
// status: QuotaExceeded for a ResourceQuota's refusal (it runs once the
// quota frees), PodForbidden for any other 403 (Pod Security admission, a
// policy engine), PodInvalid for a 422, FailedCreate otherwise.
func podCreationFailure(err error) (reason, message string) {
	if isMutated(err) {
		return ibjv1.ReasonPodMutated, err.Error()
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return ibjv1.ReasonFailedCreate, err.Error()
	}
	message = status.Status().Message
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(message, "exceeded quota"):
		return ibjv1.ReasonQuotaExceeded, message
	case apierrors.IsForbidden(err):
		return ibjv1.ReasonPodForbidden, message
	case apierrors.IsInvalid(err):
		return ibjv1.ReasonPodInvalid, message
	default:
		return ibjv1.ReasonFailedCreate, message
	}
}

// setCondition sets a condition, keeping its transition time when only the
// message changes, as meta.SetStatusCondition does. It reports whether the
// status changed to this condition.
func setCondition(st *ibjv1.IndexedBatchJobStatus, gen int64, now time.Time, typ string, status metav1.ConditionStatus, reason, message string) bool {
	old := meta.FindStatusCondition(st.Conditions, typ)
	changed := old == nil || old.Status != status
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            message,
		ObservedGeneration: gen,
		LastTransitionTime: metav1.NewTime(now),
	})
	return changed
}

func isTrue(st *ibjv1.IndexedBatchJobStatus, typ string) bool {
	return meta.IsStatusConditionTrue(st.Conditions, typ)
}

// currentTarget is the FailureTarget or SuccessCriteriaMet condition already
// set: once set, the job's end is decided and never revisited.
func currentTarget(st *ibjv1.IndexedBatchJobStatus) *metav1.Condition {
	for _, typ := range []string{ibjv1.ConditionFailureTarget, ibjv1.ConditionSuccessCriteriaMet} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// IsFinished tells whether the job reached Complete or Failed.
func IsFinished(job *ibjv1.IndexedBatchJob) bool {
	return isTrue(&job.Status, ibjv1.ConditionComplete) || isTrue(&job.Status, ibjv1.ConditionFailed)
}

// finishedAt is when the job reached Complete or Failed.
func finishedAt(job *ibjv1.IndexedBatchJob) (time.Time, bool) {
	for _, typ := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
		if c := meta.FindStatusCondition(job.Status.Conditions, typ); c != nil && c.Status == metav1.ConditionTrue {
			if typ == ibjv1.ConditionComplete && job.Status.CompletionTime != nil {
				return job.Status.CompletionTime.Time, true
			}
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}
