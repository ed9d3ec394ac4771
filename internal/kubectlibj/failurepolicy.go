package kubectlibj

import (
	"cmp"
	"fmt"
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
)

// ruleMatch is the podFailurePolicy rule that matches a failed pod.
type ruleMatch struct {
	index  int32
	action batchv1.PodFailurePolicyAction
	// exit is the container whose exit code matched an onExitCodes rule;
	// nil for an onPodConditions rule.
	exit *containerEnd
	// message says what matched, in the words of upstream's FailJob
	// condition message.
	message string
}

// knownActions are the actions the plugin understands. As upstream, a rule
// with any other action (from a newer API) is passed over.
var knownActions = []batchv1.PodFailurePolicyAction{
	batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyActionFailIndex,
	batchv1.PodFailurePolicyActionIgnore, batchv1.PodFailurePolicyActionCount,
}

// matchRules is the first rule of the policy that matches the failed pod,
// or nil: upstream's matchPodFailurePolicy, evaluated here on the pod as the
// API server has it (the plugin cannot ask the operator). ends are the
// pod's terminated containers, init containers first.
func matchRules(policy *batchv1.PodFailurePolicy, pod *corev1.Pod, ends []containerEnd) *ruleMatch {
	if policy == nil {
		return nil
	}
	for i, rule := range policy.Rules {
		if !slices.Contains(knownActions, rule.Action) {
			continue
		}
		m := &ruleMatch{index: int32(i), action: rule.Action}
		switch {
		case rule.OnExitCodes != nil:
			m.exit = exitMatching(rule.OnExitCodes, ends)
			if m.exit == nil {
				continue
			}
			m.message = fmt.Sprintf("Container %s for pod %s/%s failed with exit code %d matching %s rule at index %d",
				m.exit.container, pod.Namespace, pod.Name, m.exit.code, rule.Action, i)
		case len(rule.OnPodConditions) > 0:
			cond, ok := conditionMatching(rule.OnPodConditions, pod.Status.Conditions)
			if !ok {
				continue
			}
			m.message = fmt.Sprintf("Pod %s/%s has condition %s matching %s rule at index %d",
				pod.Namespace, pod.Name, cond, rule.Action, i)
		default:
			continue
		}
		return m
	}
	return nil
}

// exitMatching is the first container that failed (a zero exit never
// matches) with an exit code the requirement accepts, in the container it
// names if it names one.
func exitMatching(req *batchv1.PodFailurePolicyOnExitCodesRequirement, ends []containerEnd) *containerEnd {
	want := req.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn
	if !want && req.Operator != batchv1.PodFailurePolicyOnExitCodesOpNotIn {
		return nil
	}
	for i, e := range ends {
		named := req.ContainerName == nil || *req.ContainerName == e.container
		if e.code != 0 && named && slices.Contains(req.Values, e.code) == want {
			return &ends[i]
		}
	}
	return nil
}

// conditionMatching is the type of the first pod condition that one of the
// patterns names with the same status (True when the pattern leaves it
// out).
func conditionMatching(patterns []batchv1.PodFailurePolicyOnPodConditionsPattern, conds []corev1.PodCondition) (corev1.PodConditionType, bool) {
	for _, c := range conds {
		if slices.ContainsFunc(patterns, func(p batchv1.PodFailurePolicyOnPodConditionsPattern) bool {
			return p.Type == c.Type && c.Status == cmp.Or(p.Status, corev1.ConditionTrue)
		}) {
			return c.Type, true
		}
	}
	return "", false
}
