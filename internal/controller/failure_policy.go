package controller

import (
	"fmt"

	batchv1 "k8s.io/api/batch/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// onlyReplaceFailed: with podReplacementPolicy Failed (the default when a
// podFailurePolicy is set) a pod is replaced only once it reached phase
// Failed, never while it is terminating.
func onlyReplaceFailed(job *ibjv1.IndexedBatchJob) bool { return jobpod.OnlyReplaceFailed(job) }

// whyFailed says in a few words why a failed pod failed its index: what
// matched which podFailurePolicy rule, or the exit that used up the
// index's backoffLimitPerIndex.
func whyFailed(job *ibjv1.IndexedBatchJob, pod *jobpod.Pod, f jobpod.Failure) string {
	if f.Stopped {
		return fmt.Sprintf("%d failures in place; backoffLimitPerIndex reached", f.InPlace)
	}
	var what string
	switch m := f.Match; {
	case m != nil && m.Exit != nil:
		what = fmt.Sprintf("exit code %d of container %s", m.Exit.Code, m.Exit.Container)
	case m != nil:
		what = fmt.Sprintf("condition %s", m.Condition)
	case len(jobpod.OwnExits(job, pod)) > 0:
		e := jobpod.OwnExits(job, pod)[0]
		what = fmt.Sprintf("exit code %d of container %s", e.Code, e.Container)
	case pod.DeletionTimestamp != nil:
		what = "deleted before it succeeded"
	default:
		what = "pod failed"
	}
	m := f.Match
	switch {
	case m != nil && m.Action == batchv1.PodFailurePolicyActionFailIndex && m.Name != "":
		return fmt.Sprintf("%s matched %s: reason %s", what, ruleRef(m), m.Reason())
	case m != nil && m.Action == batchv1.PodFailurePolicyActionFailIndex:
		return fmt.Sprintf("%s matched %s", what, ruleRef(m))
	case m != nil:
		return fmt.Sprintf("%s matched %s; backoffLimitPerIndex reached", what, ruleRef(m))
	}
	return what + "; backoffLimitPerIndex reached"
}

// ruleRef names a matched rule in words: its position, its name if it has
// one, and its action, such as `rule 1 "bad_input" (FailIndex)`.
func ruleRef(m *jobpod.Match) string {
	if m.Name == "" {
		return fmt.Sprintf("rule %d (%s)", m.Rule, m.Action)
	}
	return fmt.Sprintf("rule %d %q (%s)", m.Rule, m.Name, m.Action)
}

// attempts is "1 attempt" or "n attempts".
func attempts(n int32) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}
