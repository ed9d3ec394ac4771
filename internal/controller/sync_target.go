package controller

import (
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// defaultBackoffLimit is batch/v1's default when backoffLimitPerIndex is unset.
const defaultBackoffLimit = 6

// decideTarget sets FailureTarget or SuccessCriteriaMet once the job reached
// its end; once set, the end is decided and never revisited.
func (s *syncState) decideTarget() {
	if s.target = currentTarget(s.status); s.target != nil {
		return
	}
	if s.target = s.newTarget(); s.target != nil {
		setCondition(s.status, s.job.Generation, s.now, s.target.Type, metav1.ConditionTrue, s.target.Reason, s.target.Message)
	}
}

// newTarget checks the end conditions in upstream's order: a FailJob rule,
// the backoff limit, the maximal number of failed indexes, the deadline,
// the success policy, all indexes completed, all indexes finished with some
// failed. "All indexes" are the job's wanted indexes; completed and
// failedIndexes hold no other.
func (s *syncState) newTarget() *metav1.Condition {
	job := s.job
	fail := func(reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: ibjv1.ConditionFailureTarget, Reason: reason, Message: msg}
	}
	succeed := func(reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: ibjv1.ConditionSuccessCriteriaMet, Reason: reason, Message: msg}
	}
	wanted := s.wanted.Len()
	switch {
	case s.unreadableIndexes:
		return nil
	case s.failJob != nil:
		// PodFailurePolicy_<name> for a named rule (KEP-4443), with
		// upstream's message.
		return fail(s.failJob.Reason(), s.failJob.Message)
	case s.restartsExhausted != nil:
		return fail(ibjv1.ReasonMaxRestartsExceeded, s.restartsExhaustedMessage())
	case s.exceedsBackoffLimit():
		return fail(ibjv1.ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	case job.Spec.BackoffLimitPerIndex != nil && job.Spec.MaxFailedIndexes != nil && s.failedIndexes.Len() > int(*job.Spec.MaxFailedIndexes):
		return fail(ibjv1.ReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes")
	case deadlinePassed(job, s.now):
		return fail(ibjv1.ReasonDeadlineExceeded, "Job was active longer than specified deadline")
	case matchSuccessPolicy(job.Spec.SuccessPolicy, job.Spec.Completions, s.completed):
		return succeed(ibjv1.ReasonSuccessPolicy, "Matched rules of the success policy")
	case s.completed.Len() >= wanted:
		return succeed(ibjv1.ReasonCompletionsReached, "Reached expected number of succeeded pods")
	case s.failedIndexes.Len() > 0 && s.completed.Len()+s.failedIndexes.Len() >= wanted:
		return fail(ibjv1.ReasonFailedIndexes, "Job has failed indexes")
	}
	return nil
}

// exceedsBackoffLimit: more failed pods than backoffLimit, or, with
// restartPolicy OnFailure, as many container restarts in running pods
// (upstream's pastBackoffLimitOnFailure). With restartPolicy Never the
// failures in place of the running pods not recorded yet count beside the
// recorded ones, as upstream counts an OnFailure pod's restarts.
func (s *syncState) exceedsBackoffLimit() bool {
	job := s.job
	limit := int32(defaultBackoffLimit)
	if job.Spec.BackoffLimit != nil {
		limit = *job.Spec.BackoffLimit
	} else if job.Spec.BackoffLimitPerIndex != nil {
		limit = math.MaxInt32
	}
	inPlace := int64(0)
	for _, ix := range s.busy {
		for _, pod := range s.indexes.get(ix).active {
			if !s.uncountedFailed.Has(pod.UID) {
				inPlace += int64(jobpod.InPlaceFailures(job, pod))
			}
		}
	}
	if int64(s.status.Failed)+int64(s.uncountedFailed.Len())+inPlace > int64(limit) {
		return true
	}
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || limit == math.MaxInt32 {
		return false
	}
	var restarts int32
	for _, ix := range s.busy {
		for _, pod := range s.indexes.get(ix).active {
			restarts += pod.Restarts
		}
	}
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}

// deadlinePassed: activeDeadlineSeconds has passed since the job started.
func deadlinePassed(job *ibjv1.IndexedBatchJob, now time.Time) bool {
	d := deadlineLeft(job, now)
	return d != nil && *d <= 0
}

// deadlineLeft is the time until activeDeadlineSeconds passes, nil without
// a deadline or before the job started.
func deadlineLeft(job *ibjv1.IndexedBatchJob, now time.Time) *time.Duration {
	if job.Spec.ActiveDeadlineSeconds == nil || job.Status.StartTime == nil {
		return nil
	}
	d := job.Status.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second).Sub(now)
	return &d
}
