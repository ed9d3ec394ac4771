package podbuild

import (
	"slices"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// maxRestartRuleValues is the most exit codes the API server accepts in
// one container restart rule.
const maxRestartRuleValues = 255

// maxExitCode is the highest exit code a Linux container reports: a
// process's exit status is 8 bits, and a kill by signal n is 128+n.
const maxExitCode = 255

// HasRetryInPlace reports whether a podFailurePolicy rule of the job
// retries in place.
func HasRetryInPlace(job *ibjv1.IndexedBatchJob) bool {
	if job.Spec.PodFailurePolicy == nil {
		return false
	}
	return slices.ContainsFunc(job.Spec.PodFailurePolicy.Rules, func(r ibjv1.PodFailurePolicyRule) bool {
		return r.Retry == ibjv1.RetryInPlace
	})
}

// setRestartRules writes, for a job with a retry InPlace rule, the
// container restart rules that make the kubelet restart a container in
// place on the exit codes those rules match: on every regular container,
// restartPolicy Never (the template's own restart rules are replaced) and
// one Restart rule for each InPlace rule that applies to it (its
// containerName, or every container), in policy order. A rule restarts on
// its exit codes less those of every earlier onExitCodes rule that
// applies to the container, whatever its action: the operator's policy
// takes the first rule that matches, so an exit code an earlier FailJob
// rule matches must still end the pod.
func setRestartRules(job *ibjv1.IndexedBatchJob, spec *corev1.PodSpec) {
	if !HasRetryInPlace(job) {
		return
	}
	for i := range spec.Containers {
		c := &spec.Containers[i]
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		c.RestartPolicyRules = RestartRules(job.Spec.PodFailurePolicy, c.Name)
	}
}

// RestartRules are the container restart rules of container for the
// policy's retry InPlace rules (see setRestartRules), nil when none
// applies to it.
func RestartRules(policy *ibjv1.PodFailurePolicy, container string) []corev1.ContainerRestartRule {
	var rules []corev1.ContainerRestartRule
	for i, r := range policy.Rules {
		if r.Retry != ibjv1.RetryInPlace || !appliesTo(r, container) {
			continue
		}
		codes := policyCodes(r.OnExitCodes)
		for _, earlier := range policy.Rules[:i] {
			if appliesTo(earlier, container) {
				codes = codes.minus(policyCodes(earlier.OnExitCodes))
			}
		}
		if rule, ok := codes.restartRule(); ok {
			rules = append(rules, rule)
		}
	}
	return rules
}

// appliesTo: the rule matches exit codes of the container.
func appliesTo(r ibjv1.PodFailurePolicyRule, container string) bool {
	req := r.OnExitCodes
	return req != nil && (req.ContainerName == nil || *req.ContainerName == container)
}

// exitCodes is a set of exit codes: codes, or, when notIn, every code but
// codes.
type exitCodes struct {
	notIn bool
	codes sets.Set[int32]
}

// policyCodes are the exit codes a podFailurePolicy requirement matches.
// It never matches 0 (a container that succeeded did not fail the pod), so
// a NotIn set always holds 0: a container restart rule NotIn without 0
// would restart a container that succeeded. An unknown operator matches
// nothing.
func policyCodes(req *batchv1.PodFailurePolicyOnExitCodesRequirement) exitCodes {
	switch req.Operator {
	case batchv1.PodFailurePolicyOnExitCodesOpIn:
		return exitCodes{codes: sets.New(req.Values...).Delete(0)}
	case batchv1.PodFailurePolicyOnExitCodesOpNotIn:
		return exitCodes{notIn: true, codes: sets.New(req.Values...).Insert(0)}
	}
	return exitCodes{codes: sets.New[int32]()}
}

// minus is s without the codes of o.
func (s exitCodes) minus(o exitCodes) exitCodes {
	switch {
	case !s.notIn && !o.notIn:
		return exitCodes{codes: s.codes.Difference(o.codes)}
	case !s.notIn: // s ∩ o.codes
		return exitCodes{codes: s.codes.Intersection(o.codes)}
	case !o.notIn: // not (s.codes ∪ o.codes)
		return exitCodes{notIn: true, codes: s.codes.Union(o.codes)}
	default: // o.codes less s.codes
		return exitCodes{codes: o.codes.Difference(s.codes)}
	}
}

// restartRule is the container restart rule that restarts on s, false
// when s is empty. A NotIn set of more codes than a rule takes cannot be
// written as one (rules add up, so two NotIn rules restart on more than
// either): it is written as the codes 1 to 255 that it holds, which are
// every code a Linux container exits with; a code above 255 then ends the
// pod, as retry NewPod, rather than restart a container on a code an
// earlier rule matches.
func (s exitCodes) restartRule() (corev1.ContainerRestartRule, bool) {
	op := corev1.ContainerRestartRuleOnExitCodesOpIn
	codes := s.codes
	switch {
	case s.notIn && codes.Len() <= maxRestartRuleValues:
		op = corev1.ContainerRestartRuleOnExitCodesOpNotIn
	case s.notIn:
		held := sets.New[int32]()
		for code := int32(1); code <= maxExitCode; code++ {
			if !codes.Has(code) {
				held.Insert(code)
			}
		}
		codes = held
	}
	if op == corev1.ContainerRestartRuleOnExitCodesOpIn && codes.Len() == 0 {
		return corev1.ContainerRestartRule{}, false
	}
	return corev1.ContainerRestartRule{
		Action:    corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: sets.List(codes)},
	}, true
}
