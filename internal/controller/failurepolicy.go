package controller

import (
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
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
