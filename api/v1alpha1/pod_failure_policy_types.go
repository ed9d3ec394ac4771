package v1alpha1

import (
	batchv1 "k8s.io/api/batch/v1"
)

// PodFailurePolicy is batch/v1's PodFailurePolicy, field for field, with
// additions on each rule: a name, which makes the reason of a FailJob or
// FailIndex match PodFailurePolicy_<name> (as upstream's KEP-4443 plans);
// a retry delay for Count and Ignore rules; a retry in place for Count
// rules; and the action RestartJob, which restarts the job's pods together.
// A batch/v1 policy is a valid policy here unchanged.
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
// +kubebuilder:validation:XValidation:rule="!has(self.retry) || self.retry != 'InPlace' || (self.action == 'Count' && has(self.onExitCodes))",message="podFailurePolicy retry InPlace needs action Count and onExitCodes: the kubelet restarts a container in place on its exit code, and cannot match pod conditions"
// +kubebuilder:validation:XValidation:rule="!has(self.retry) || self.retry != 'InPlace' || !has(self.retryDelaySeconds)",message="podFailurePolicy retryDelaySeconds cannot be set with retry InPlace: the kubelet's restart backoff decides when a container restarts in place"
// +kubebuilder:validation:XValidation:rule="!has(self.restartIndexes) || self.action == 'RestartJob'",message="podFailurePolicy restartIndexes can only be set on a rule whose action is RestartJob"
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
	// - RestartJob: the job's pods restart together, as one group: every
	//   pod of the job that has not finished is ended, and once none of
	//   them is left, every unfinished index starts again (restartIndexes
	//   All: every index) with its next attempt, its failure count
	//   (against backoffLimitPerIndex) and its backoff afresh. The two
	//   generations never overlap. Each restart adds one to
	//   status.restarts; once spec.maxRestarts restarts were made, such a
	//   failure fails the job with reason MaxRestartsExceeded (and counts,
	//   as a Count rule's would). Neither the failure that restarted the
	//   pods nor the ends of the pods the restart stopped (their failures
	//   in place included) count against backoffLimit or
	//   backoffLimitPerIndex, or in status.failed; failures counted before
	//   the restart stay. Needs
	//   spec.maxRestarts. Not in batch/v1: Volcano's RestartJob, JobSet's
	//   restart of the whole set.
	// +required
	// +kubebuilder:validation:Enum=FailJob;FailIndex;Ignore;Count;RestartJob
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

	// retry is, for a Count rule with onExitCodes, how the index is tried
	// again after a failure the rule matches:
	//
	// - NewPod (the default): the failed pod ends and the index gets a new
	//   pod, after the retry backoff.
	// - InPlace: the kubelet restarts the container that exited with one
	//   of the rule's exit codes inside its pod (container restart rules,
	//   Kubernetes 1.35 or later with feature gate ContainerRestartRules,
	//   on by default): no new pod, no rescheduling, no image pull. The
	//   operator writes the rule, and every rule before it that matches
	//   exit codes, as restartPolicyRules on the template's containers
	//   (the rule's containerName, or every container), so that an exit
	//   code an earlier rule matches still ends the pod. Each restart
	//   counts as a failure of the index, against backoffLimitPerIndex and
	//   backoffLimit, in the index's failure count and in status.failed
	//   (once the pod finished); an index whose failures go over
	//   backoffLimitPerIndex in place fails, and its pod is stopped. The
	//   delay between restarts is the kubelet's restart backoff, not
	//   spec.retryBackoff. The admission webhook refuses the job where
	//   the API server drops container restart rules, and warns when a
	//   node's kubelet is older than 1.35 (its pods then fail and are
	//   replaced as NewPod).
	// +optional
	// +kubebuilder:validation:Enum=NewPod;InPlace
	Retry RetryMode `json:"retry,omitempty"`

	// restartIndexes is, for a RestartJob rule, which indexes the restart
	// starts again: Unfinished (the default) keeps the completed and
	// failed indexes as they are; All clears completedIndexes and
	// failedIndexes (and with them status.succeeded) and runs every index
	// again, for a group whose results are only valid together.
	// +optional
	// +kubebuilder:validation:Enum=Unfinished;All
	RestartIndexes RestartIndexes `json:"restartIndexes,omitempty"`
}

// PodFailurePolicyActionRestartJob is the action of a rule that restarts
// the job's pods together. batch/v1 has no such action.
const PodFailurePolicyActionRestartJob batchv1.PodFailurePolicyAction = "RestartJob"

// RetryMode is how a Count rule retries an index: with a new pod or in
// place.
type RetryMode string

// Retry modes.
const (
	RetryNewPod  RetryMode = "NewPod"
	RetryInPlace RetryMode = "InPlace"
)

// RestartIndexes is which indexes a RestartJob rule runs again.
type RestartIndexes string

// Restart scopes.
const (
	RestartUnfinishedIndexes RestartIndexes = "Unfinished"
	RestartAllIndexes        RestartIndexes = "All"
)
