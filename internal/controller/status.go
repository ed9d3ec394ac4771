package controller

import (
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

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

// phaseOf summarises the conditions for `kubectl get`.
func phaseOf(st *ibjv1.IndexedBatchJobStatus) ibjv1.Phase {
	switch {
	case isTrue(st, ibjv1.ConditionFailed):
		return ibjv1.PhaseFailed
	case isTrue(st, ibjv1.ConditionComplete):
		return ibjv1.PhaseComplete
	case isTrue(st, ibjv1.ConditionSuspended):
		return ibjv1.PhaseSuspended
	case st.StartTime != nil:
		return ibjv1.PhaseRunning
	default:
		return ibjv1.PhasePending
	}
}

// uidSet reads one list of uncountedTerminatedPods.
func uidSet(uids []types.UID) sets.Set[types.UID] {
	return sets.New(uids...)
}

// uncountedOf writes the uncounted sets back, sorted so that an unchanged
// set never looks like a change; nil when both are empty.
func uncountedOf(succeeded, failed sets.Set[types.UID]) *batchv1.UncountedTerminatedPods {
	if succeeded.Len() == 0 && failed.Len() == 0 {
		return nil
	}
	u := &batchv1.UncountedTerminatedPods{}
	if succeeded.Len() > 0 {
		u.Succeeded = sets.List(succeeded)
	}
	if failed.Len() > 0 {
		u.Failed = sets.List(failed)
	}
	return u
}
