package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
)

// PodFailurePolicy is batch/v1's PodFailurePolicy, field for field, with two
// additions on each rule: a name, which makes the reason of a FailJob or
// FailIndex match PodFailurePolicy_<name> (as upstream's KEP-4443 plans),
// and a retry delay for Count and Ignore rules. A batch/v1 policy is a
// valid policy here unchanged.
type PodFailurePolicy struct {
	// rules are evaluated in order. Once a rule matches a pod failure, the
	// rest are ignored. When no rule matches, the default handling applies:
	// the failure counts against backoffLimit (and backoffLimitPerIndex).
	// At most 20 rules. Rule names must be unique.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:XValidation:rule="self.all(r, !has(r.name) || self.exists_one(s, has(s.name) && s.name == r.name))",message="podFailurePolicy rule names must be unique"
	Rules []PodFailurePolicyRule `json:"rules"`
}

// PodFailurePolicyRule describes how a pod failure is handled when the
// requirements are met: batch/v1's PodFailurePolicyRule plus name and
// retryDelaySeconds. One of onExitCodes and onPodConditions, but not both,
// is set in each rule.
//
// +kubebuilder:validation:XValidation:rule="has(self.onExitCodes) != has(self.onPodConditions)",message="each podFailurePolicy rule must set exactly one of onExitCodes and onPodConditions"
// +kubebuilder:validation:XValidation:rule="!has(self.retryDelaySeconds) || self.action in ['Count', 'Ignore']",message="podFailurePolicy retryDelaySeconds can only be set on a rule whose action is Count or Ignore"
type PodFailurePolicyRule struct {
	// name names the rule. When a FailJob rule with a name fails the job,
	// the reason of the job's FailureTarget and Failed conditions is
	// PodFailurePolicy_<name> (unnamed: PodFailurePolicy, as batch/v1); when
	// a FailIndex rule with a name fails an index, the IndexFailed event and
	// `kubectl ibj indexes` give that reason. So that
	// PodFailurePolicy_<name> is a valid condition reason, a name is 1 to
	// 63 letters, digits and '_', starting with a letter and ending with a
	// letter or digit (such as ExitCode42 or bad_input; '-' is not allowed
	// in condition reasons). Names are unique within the policy.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z]([A-Za-z0-9_]*[A-Za-z0-9])?$')",message="podFailurePolicy rule name must be letters, digits and '_', starting with a letter and ending with a letter or digit (it becomes the condition reason PodFailurePolicy_<name>, where '-' is not allowed)"
	Name string `json:"name,omitempty"`

	// action is taken on a pod failure when the requirements are satisfied:
	//
	// - FailJob: the job is marked as Failed and its running pods are
	//   terminated.
	// - FailIndex: the pod's index is marked as failed and is not restarted
	//   (needs backoffLimitPerIndex).
	// - Ignore: the failure counts against no limit and the index gets a
	//   new pod, after retryDelaySeconds if set, else at once.
	// - Count: the failure is handled the default way: it counts against
	//   backoffLimit and backoffLimitPerIndex.
	// +required
	// +kubebuilder:validation:Enum=FailJob;FailIndex;Ignore;Count
	Action batchv1.PodFailurePolicyAction `json:"action"`

	// onExitCodes is the requirement on the container exit codes.
	// +optional
	OnExitCodes *batchv1.PodFailurePolicyOnExitCodesRequirement `json:"onExitCodes,omitempty"`

	// onPodConditions is the requirement on the pod conditions, a list of
	// pod condition patterns. The requirement is satisfied if at least one
	// pattern matches an actual pod condition. At most 20 patterns.
	// +optional
	// +listType=atomic
	OnPodConditions []batchv1.PodFailurePolicyOnPodConditionsPattern `json:"onPodConditions,omitempty"`

	// retryDelaySeconds is, for a Count or Ignore rule, the delay before
	// the next pod of a failure this rule matched: that many seconds after
	// the failed pod ended, in place of spec.retryBackoff's exponential
	// delay. A failure a Count rule matched still counts among the
	// failures that the exponential delay of later, unmatched failures
	// grows with; one an Ignore rule matched never does. Unset: a Count
	// rule's failure waits the exponential delay, an Ignore rule's none
	// (the index is retried at once). At most 86400 (a day).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	RetryDelaySeconds *int32 `json:"retryDelaySeconds,omitempty"`
}
