package controller

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// failureVerdict is how one failed pod is handled under the podFailurePolicy.
type failureVerdict struct {
	action batchv1.PodFailurePolicyAction
	// message explains a FailJob match; it names the rule and the pod.
	message string
}

// matchFailurePolicy applies the rules in order, first match wins, as
// upstream's matchPodFailurePolicy. Without a policy, or when no rule
// matches, the failure is counted.
func matchFailurePolicy(policy *batchv1.PodFailurePolicy, pod *cachedPod) failureVerdict {
	if policy == nil {
		return failureVerdict{action: batchv1.PodFailurePolicyActionCount}
	}
	for i, rule := range policy.Rules {
		switch rule.Action {
		case batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionFailIndex,
			batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount:
		default:
			continue // an action from a newer API is skipped, as upstream does
		}
		var why string
		if rule.OnExitCodes != nil {
			cs := matchExitCodes(pod, rule.OnExitCodes)
			if cs == nil {
				continue
			}
			why = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d matching %s rule at index %d",
				cs.name, pod.Namespace, pod.Name, cs.code, rule.Action, i)
		} else if rule.OnPodConditions != nil {
			cond := matchPodConditions(pod, rule.OnPodConditions)
			if cond == nil {
				continue
			}
			why = fmt.Sprintf("Pod %s/%s has condition %s matching %s rule at index %d",
				pod.Namespace, pod.Name, cond.typ, rule.Action, i)
		} else {
			continue
		}
		return failureVerdict{action: rule.Action, message: why}
	}
	return failureVerdict{action: batchv1.PodFailurePolicyActionCount}
}

// matchExitCodes finds a terminated container, init containers included,
// whose non-zero exit code satisfies the requirement. A zero exit code never
// matches: a container that succeeded did not cause the failure.
func matchExitCodes(pod *cachedPod, req *batchv1.PodFailurePolicyOnExitCodesRequirement) *containerExit {
	for i := range pod.exits {
		cs := &pod.exits[i]
		if req.ContainerName != nil && *req.ContainerName != cs.name {
			continue
		}
		in := slices.Contains(req.Values, cs.code)
		switch req.Operator {
		case batchv1.PodFailurePolicyOnExitCodesOpIn:
			if in {
				return cs
			}
		case batchv1.PodFailurePolicyOnExitCodesOpNotIn:
			if !in {
				return cs
			}
		}
	}
	return nil
}

// matchPodConditions finds a pod condition equal in type and status (status
// defaulting to True) to one of the patterns.
func matchPodConditions(pod *cachedPod, patterns []batchv1.PodFailurePolicyOnPodConditionsPattern) *podCondition {
	for i := range pod.conditions {
		c := &pod.conditions[i]
		for _, p := range patterns {
			status := p.Status
			if status == "" {
				status = corev1.ConditionTrue
			}
			if c.typ == p.Type && c.status == status {
				return c
			}
		}
	}
	return nil
}

// podFailure is how one finished pod counts, decided once by classifyFailure
// for every place that needs it: recording the pod, numbering the index's
// next attempt, holding its finalizer for the retry, the job-wide backoff
// and rebuilding the index sets from the pods.
type podFailure struct {
	// failed: the pod ended in failure (phase Failed, or deleted before it
	// succeeded when terminating pods are replaced at once).
	failed bool
	// ignored: an Ignore rule matched; the failure counts against nothing,
	// but still delays the index's next attempt.
	ignored bool
	// counted: the failure counts against backoffLimit and its index's
	// backoffLimitPerIndex.
	counted bool
	// failsIndex: with backoffLimitPerIndex, the index is failed for good
	// (a FailIndex rule matched, or the index's failures went over its limit).
	failsIndex bool
	// failsJob is the message of a matched FailJob rule, "" otherwise.
	failsJob string
}

// classifyFailure decides how a pod of the job counts, as upstream's
// isPodFailed, matchPodFailurePolicy and isIndexFailed together: a failed pod
// that no Ignore rule matches counts against the job and its index, whatever
// other rule matched (a FailJob match fails the index too once it is over
// its limit), and a FailIndex match fails its index at once.
func classifyFailure(job *ibjv1.IndexedBatchJob, pod *cachedPod) podFailure {
	if !countsAsFailed(pod, onlyReplaceFailed(job)) {
		return podFailure{}
	}
	v := matchFailurePolicy(job.Spec.PodFailurePolicy, pod)
	if v.action == batchv1.PodFailurePolicyActionIgnore {
		return podFailure{failed: true, ignored: true}
	}
	f := podFailure{failed: true, counted: true}
	if limit := job.Spec.BackoffLimitPerIndex; limit != nil {
		f.failsIndex = v.action == batchv1.PodFailurePolicyActionFailIndex || pod.failures+1 > *limit
	}
	if v.action == batchv1.PodFailurePolicyActionFailJob {
		f.failsJob = v.message
	}
	return f
}

// onlyReplaceFailed: with podReplacementPolicy Failed (the default when a
// podFailurePolicy is set) a pod is replaced only once it reached phase
// Failed, never while it is terminating.
func onlyReplaceFailed(job *ibjv1.IndexedBatchJob) bool {
	if job.Spec.PodReplacementPolicy != nil {
		return *job.Spec.PodReplacementPolicy == batchv1.Failed
	}
	return job.Spec.PodFailurePolicy != nil
}

// countsAsFailed mirrors upstream's isPodFailed: phase Failed, or, when
// terminating pods are replaced at once, a pod deleted before it succeeded
// (it may never get the chance to reach phase Failed).
func countsAsFailed(pod *cachedPod, onlyFailed bool) bool {
	if isDiscarded(pod) {
		return false
	}
	if pod.phase == corev1.PodFailed {
		return true
	}
	return !onlyFailed && pod.DeletionTimestamp != nil && pod.phase != corev1.PodSucceeded
}
