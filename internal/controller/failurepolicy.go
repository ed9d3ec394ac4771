package controller

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// classifyFailure decides how a pod of the job counts (jobpod.Classify, the
// one decision the kubectl plugin shows too): recording the pod, numbering
// the index's next attempt, holding its finalizer for the retry, the
// job-wide backoff and rebuilding the index sets from the pods all call it.
func classifyFailure(job *ibjv1.IndexedBatchJob, pod *cachedPod) jobpod.Failure {
	return jobpod.Classify(job, endOf(pod))
}

// endOf is what jobpod decides a cached pod's failure from.
func endOf(pod *cachedPod) jobpod.Ended {
	return jobpod.Ended{
		Namespace:  pod.Namespace,
		Name:       pod.Name,
		Phase:      pod.phase,
		Deleting:   pod.DeletionTimestamp != nil,
		Discarded:  isDiscarded(pod),
		Failures:   pod.failures,
		Exits:      pod.exits,
		Conditions: pod.conditions,
	}
}

// onlyReplaceFailed: with podReplacementPolicy Failed (the default when a
// podFailurePolicy is set) a pod is replaced only once it reached phase
// Failed, never while it is terminating.
func onlyReplaceFailed(job *ibjv1.IndexedBatchJob) bool { return jobpod.OnlyReplaceFailed(job) }

// whyFailed says in a few words why a failed pod failed its index: what
// matched which podFailurePolicy rule, or the exit that used up the
// index's backoffLimitPerIndex.
func whyFailed(pod *cachedPod, f jobpod.Failure) string {
	var what string
	switch m := f.Match; {
	case m != nil && m.Exit != nil:
		what = fmt.Sprintf("exit code %d of container %s", m.Exit.Code, m.Exit.Container)
	case m != nil:
		what = fmt.Sprintf("condition %s", m.Condition)
	case len(pod.exits) > 0:
		what = fmt.Sprintf("exit code %d of container %s", pod.exits[0].Code, pod.exits[0].Container)
	case pod.DeletionTimestamp != nil:
		what = "deleted before it succeeded"
	default:
		what = "pod failed"
	}
	if m := f.Match; m != nil && m.Action == batchv1.PodFailurePolicyActionFailIndex {
		return fmt.Sprintf("%s matched rule %d (%s)", what, m.Rule, m.Action)
	}
	if m := f.Match; m != nil {
		return fmt.Sprintf("%s matched rule %d (%s); backoffLimitPerIndex reached", what, m.Rule, m.Action)
	}
	return what + "; backoffLimitPerIndex reached"
}

// attempts is "1 attempt" or "n attempts".
func attempts(n int32) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
