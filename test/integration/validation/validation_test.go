package validation

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Messages of the CRD's own rules, as a user reads them. Each is asserted
// verbatim (as a substring of the API server's answer), so a rule that fires
// with the wrong message, or another rule that fires instead, fails the test.
const (
	msgMaxFailedNeedsPerIndex   = "maxFailedIndexes can only be set together with backoffLimitPerIndex"
	msgMaxFailedAboveCompletion = "maxFailedIndexes must be less than or equal to completions"
	msgHugeJobMaxFailed         = "when completions is greater than 100000 and backoffLimitPerIndex is set, maxFailedIndexes must be set and at most 10000"
	msgHugeJobParallelism       = "when completions is greater than 100000 and backoffLimitPerIndex is set, parallelism must be set and at most 10000"
	msgRestartPolicy            = "template.spec.restartPolicy must be Never or OnFailure"
	msgRestartPolicyWithPFP     = "template.spec.restartPolicy must be Never when podFailurePolicy is set"
	msgReplacementWithPFP       = "podReplacementPolicy must be Failed when podFailurePolicy is set"
	msgTerminatingTimeout       = "terminatingTimeoutSeconds needs podReplacementPolicy Failed (the default with a podFailurePolicy): under TerminatingOrFailed a terminating pod is replaced at once"
	msgFailIndexNeedsPerIndex   = "podFailurePolicy action FailIndex can only be used together with backoffLimitPerIndex"
	msgUnknownContainer         = "podFailurePolicy onExitCodes.containerName must name a container or init container of the template"
	msgExactlyOneRequirement    = "each podFailurePolicy rule must set exactly one of onExitCodes and onPodConditions"
	msgExitCodesSorted          = "onExitCodes.values must be sorted in ascending order"
	msgZeroExitCodeWithIn       = "onExitCodes.values must not contain 0 with operator In"
	msgSuccessRuleEmpty         = "each successPolicy rule must set succeededIndexes, succeededCount or both"
	msgSucceededCountTooLarge   = "successPolicy rules' succeededCount must be less than or equal to completions"
	msgSucceededIndexesFormat   = `succeededIndexes must be comma-separated indexes or ranges such as "0,2-5"`
	msgSucceededIndexesRange    = "successPolicy rules' succeededIndexes must be within 0 and completions-1"
	msgSucceededIndexesOrder    = "succeededIndexes must be in increasing order, without repeated indexes or overlapping ranges, and each range must go from the lower index to the higher"
	msgNameNotDNSLabel          = "metadata.name must be a DNS label"
	msgHostnameTooLong          = "metadata.name is too long: the pod hostname <name>-<completions-1> must be at most 63 characters"
	msgManagedByFormat          = "managedBy must be a domain-prefixed path such as example.com/my-controller"
	msgCompletionsInTandem      = "completions can only be modified in tandem with spec.parallelism"
	msgIndexesFormat            = `indexes must be comma-separated indexes or ranges such as "0,2-5"`
	msgIndexesOrder             = "indexes must be in increasing order, without repeated indexes or overlapping ranges, and each range must go from the lower index to the higher"
	msgIndexesRange             = "indexes must be within 0 and completions-1"
	msgIndexesImmutable         = "indexes is immutable"
	msgRetryBackoffOrder        = "retryBackoff.initialDelaySeconds must be less than or equal to maxDelaySeconds"
	msgTemplateImmutable        = "template is immutable, except for labels, annotations, nodeSelector, affinity, tolerations, schedulingGates and container resources while the job is suspended"
	msgContainersChanged        = "template.spec.containers may change only while the job is suspended, and then only in their resources: the containers, their names and their order stay"
	msgInitContainersChanged    = "template.spec.initContainers may change only while the job is suspended, and then only in their resources: the containers, their names and their order stay"
	msgSubdomainNeedsDNS        = "network.subdomain can only be set when network.enableDNSHostnames is true"
	msgSubdomainFormat          = "network.subdomain must be a DNS-1035 label: lowercase letters, digits and '-', starting with a letter and ending with a letter or digit"
	msgServiceNameFromJobName   = "metadata.name must start with a letter when network.enableDNSHostnames is true and network.subdomain is unset: the name is then the headless Service's, which must be a DNS-1035 label; or set network.subdomain"
	msgTemplateSubdomain        = "template.spec.subdomain must be unset or equal to the headless Service's name (network.subdomain, or metadata.name when that is unset) when network.enableDNSHostnames is true"
	msgNetworkImmutable         = "network is immutable"
	msgRuleNameFormat           = "podFailurePolicy rule name must be letters, digits and '_', starting with a letter and ending with a letter or digit (it becomes the condition reason PodFailurePolicy_<name>, where '-' is not allowed)"
	msgRuleNamesUnique          = "podFailurePolicy rule names must be unique"
	msgRetryDelayAction         = "podFailurePolicy retryDelaySeconds can only be set on a rule whose action is Count or Ignore"
	msgMaxRestartsExactly       = "maxRestarts must be set exactly when a podFailurePolicy rule's action is RestartJob: it bounds the restarts such rules make"
	msgMaxRestartsImmutable     = "maxRestarts is immutable"
	msgInPlaceNeedsCount        = "podFailurePolicy retry InPlace needs action Count and onExitCodes: the kubelet restarts a container in place on its exit code, and cannot match pod conditions"
	msgInPlaceNoDelay           = "podFailurePolicy retryDelaySeconds cannot be set with retry InPlace: the kubelet's restart backoff decides when a container restarts in place"
	msgRestartIndexesAction     = "podFailurePolicy restartIndexes can only be set on a rule whose action is RestartJob"
	msgMaxMemoryPositive        = "retryResources.onOOMKilled.maxMemory must be greater than 0"
	msgMaxMemoryBound           = "retryResources.onOOMKilled.maxMemory must be at most 64Ti"
	msgGangImmutable            = "gangScheduling is immutable"
	msgGangAboveParallelism     = "gangScheduling.minCount must be less than or equal to parallelism: the gang is the pods that run at once"
	msgGangAboveCompletions     = "gangScheduling.minCount must be less than or equal to completions"
	msgGangSchedulingGroup      = "template.spec.schedulingGroup must be unset when gangScheduling is set: the operator points the pods at the job's own PodGroup"
)

// Messages the API server writes for the OpenAPI schema's own bounds.
const (
	msgNotNegative    = "should be greater than or equal to 0"
	msgAtMost100000   = "should be less than or equal to 100000"
	msgAtLeastOneItem = "should have at least 1 items"
	msgAtLeastOneChar = "should be at least 1 chars long"
	msgAtMost20Items  = "must have at most 20 items"
	msgAtMost255Items = "must have at most 255 items"
	msgAtMost63Bytes  = "may not be more than 63 bytes"
	msgUnsupported    = "Unsupported value"
)

const (
	failJob   = batchv1.PodFailurePolicyActionFailJob
	failIndex = batchv1.PodFailurePolicyActionFailIndex
	ignore    = batchv1.PodFailurePolicyActionIgnore
	count     = batchv1.PodFailurePolicyActionCount
	in        = batchv1.PodFailurePolicyOnExitCodesOpIn
	notIn     = batchv1.PodFailurePolicyOnExitCodesOpNotIn
	restart   = v1alpha1.PodFailurePolicyActionRestartJob
)

// retryInPlace is job() with one rule of the given action on exit code 3
// that asks for retry InPlace.
func retryInPlace(action batchv1.PodFailurePolicyAction) *harness.JobWrapper {
	return job().PodFailurePolicy(harness.OnExitCodes(action, "", in, 3)).
		EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].Retry = v1alpha1.RetryInPlace })
}

// restartJob is job() with one RestartJob rule on exit code 3.
func restartJob() *harness.JobWrapper {
	return job().PodFailurePolicy(harness.OnExitCodes(restart, "", in, 3))
}

// job is the valid base every entry starts from: four indexes, one
// container named "main", restartPolicy Never.
func job() *harness.JobWrapper {
	return harness.MakeIndexedBatchJob("job", namespace).Completions(4)
}

// suspendedJob is job() created suspended, the only state in which the
// template's scheduling directives may change.
func suspendedJob() *harness.JobWrapper {
	return job().Suspend(true)
}

// withNetwork is job() with spec.network set to n, for the combinations
// the builder's PeerDNS does not make.
func withNetwork(n v1alpha1.Network) *v1alpha1.IndexedBatchJob {
	j := job().Obj()
	j.Spec.Network = &n
	return j
}

// withTemplateSchedulingGroup is j with the template's
// spec.schedulingGroup naming a PodGroup of the user's.
func withTemplateSchedulingGroup(j *v1alpha1.IndexedBatchJob) *v1alpha1.IndexedBatchJob {
	j.Spec.Template.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To("mine")}
	return j
}

// exitCodes returns from, from+1, ..., to.
func exitCodes(from, to int32) []int32 {
	var out []int32
	for v := from; v <= to; v++ {
		out = append(out, v)
	}
	return out
}

// nameOfLength is a valid DNS label of exactly n characters.
func nameOfLength(n int) string {
	return "j" + strings.Repeat("a", n-1)
}

func failurePolicyRules(n int) []batchv1.PodFailurePolicyRule {
	out := make([]batchv1.PodFailurePolicyRule, n)
	for i := range out {
		out[i] = harness.OnExitCodes(failJob, "", in, int32(i+1))
	}
	return out
}

// withRules is the job w builds, its podFailurePolicy rules changed by
// edit (to name them, or give them a retry delay).
func withRules(w *harness.JobWrapper, edit func(rules []v1alpha1.PodFailurePolicyRule)) *v1alpha1.IndexedBatchJob {
	j := w.Obj()
	edit(j.Spec.PodFailurePolicy.Rules)
	return j
}

// named is job() with one FailJob rule of the given name.
func named(name string) *v1alpha1.IndexedBatchJob {
	return withRules(job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)),
		func(r []v1alpha1.PodFailurePolicyRule) { r[0].Name = name })
}

// delayed is job() (with backoffLimitPerIndex, for FailIndex) with one rule
// of the given action and retryDelaySeconds.
func delayed(action batchv1.PodFailurePolicyAction, seconds int32) *v1alpha1.IndexedBatchJob {
	return withRules(job().BackoffLimitPerIndex(1).PodFailurePolicy(harness.OnExitCodes(action, "", in, 1)),
		func(r []v1alpha1.PodFailurePolicyRule) { r[0].RetryDelaySeconds = ptr.To(seconds) })
}

// onOOMKilled is job() with retryResources.onOOMKilled.
func onOOMKilled(factorPercent int32, maxMemory string) *v1alpha1.IndexedBatchJob {
	return job().RetryOnOOMKilled(factorPercent, maxMemory).Obj()
}

// createRefusedDelay is job() with retryBackoff.createRefusedDelaySeconds.
func createRefusedDelay(seconds int32) *v1alpha1.IndexedBatchJob {
	j := job().Obj()
	j.Spec.RetryBackoff = &v1alpha1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To(seconds)}
	return j
}

func successPolicyRules(n int) []batchv1.SuccessPolicyRule {
	out := make([]batchv1.SuccessPolicyRule, n)
	for i := range out {
		out[i] = harness.SucceededCount(1)
	}
	return out
}

// expectRejected asserts that the API server refused the object as Invalid,
// saying message.
func expectRejected(err error, message string) {
	GinkgoHelper()
	Expect(err).To(HaveOccurred(), "the API server accepted the object; want it rejected with %q", message)
	Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want an Invalid error, got: %v", err)
	if wordings, ok := schemaWordings[message]; ok {
		Expect(err.Error()).To(Or(ContainSubstring(wordings[0]), ContainSubstring(wordings[1])))
		return
	}
	Expect(err.Error()).To(ContainSubstring(message))
}

// schemaWordings are the two wordings of a schema bound whose message
// kube-apiserver 1.38 rewrote: up to 1.37's, and from 1.38 on. Either says the
// object was refused for that bound.
var schemaWordings = map[string][2]string{
	msgAtLeastOneItem: {msgAtLeastOneItem, "must have at least 1 item"},
	msgAtLeastOneChar: {msgAtLeastOneChar, "must be at least 1 character"},
}

// create submits job and, should it be accepted, deletes it after the entry,
// so that one wrongly accepted object does not make the next entries fail on
// a name clash.
func create(job *v1alpha1.IndexedBatchJob) error {
	GinkgoHelper()
	err := k8sClient.Create(ctx, job)
	if err == nil {
		DeferCleanup(func() {
			Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, job))).To(Succeed())
		})
	}
	return err
}

// update creates base, then applies change to the stored object and
// submits it; it returns the update's error.
func update(base *v1alpha1.IndexedBatchJob, change func(*v1alpha1.IndexedBatchJob)) error {
	GinkgoHelper()
	Expect(create(base)).To(Succeed(), "the base object of an update must be valid")
	stored := &v1alpha1.IndexedBatchJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(base), stored)).To(Succeed())
	change(stored)
	return k8sClient.Update(ctx, stored)
}

// zoneLabel is the node label the templates' nodeSelectors name.
const zoneLabel = "zone"

var _ = Describe("IndexedBatchJob admission", func() {
	DescribeTable("rejects an invalid job at creation",
		func(job *v1alpha1.IndexedBatchJob, message string) {
			expectRejected(create(job), message)
		},

		// Bounds of the OpenAPI schema.
		Entry("negative parallelism", job().Parallelism(-1).Obj(), msgNotNegative),
		Entry("parallelism above 100000", job().Parallelism(100001).Obj(), msgAtMost100000),
		Entry("negative completions", job().Completions(-1).Obj(), msgNotNegative),
		Entry("negative backoffLimit", job().BackoffLimit(-1).Obj(), msgNotNegative),
		Entry("negative backoffLimitPerIndex", job().BackoffLimitPerIndex(-1).Obj(), msgNotNegative),
		Entry("negative maxFailedIndexes", job().BackoffLimitPerIndex(1).MaxFailedIndexes(-1).Obj(), msgNotNegative),
		Entry("maxFailedIndexes above 100000",
			job().Completions(200000).Parallelism(1).BackoffLimitPerIndex(1).MaxFailedIndexes(100001).Obj(), msgAtMost100000),
		Entry("negative ttlSecondsAfterFinished", job().TTLSecondsAfterFinished(-1).Obj(), msgNotNegative),
		Entry("negative activeDeadlineSeconds", job().ActiveDeadlineSeconds(-1).Obj(), msgNotNegative),

		// Backoff limit per index and max failed indexes.
		Entry("maxFailedIndexes without backoffLimitPerIndex", job().MaxFailedIndexes(1).Obj(), msgMaxFailedNeedsPerIndex),
		Entry("maxFailedIndexes above completions",
			job().Completions(4).BackoffLimitPerIndex(1).MaxFailedIndexes(5).Obj(), msgMaxFailedAboveCompletion),
		Entry("more than 100000 completions with backoffLimitPerIndex but no maxFailedIndexes",
			job().Completions(100001).Parallelism(10000).BackoffLimitPerIndex(1).Obj(), msgHugeJobMaxFailed),
		Entry("more than 100000 completions with backoffLimitPerIndex and maxFailedIndexes above 10000",
			job().Completions(100001).Parallelism(10000).BackoffLimitPerIndex(1).MaxFailedIndexes(10001).Obj(), msgHugeJobMaxFailed),
		Entry("more than 100000 completions with backoffLimitPerIndex and parallelism above 10000",
			job().Completions(100001).Parallelism(10001).BackoffLimitPerIndex(1).MaxFailedIndexes(10000).Obj(), msgHugeJobParallelism),

		// Restart policy.
		Entry("restartPolicy Always", job().RestartPolicy(corev1.RestartPolicyAlways).Obj(), msgRestartPolicy),
		Entry("restartPolicy missing", job().RestartPolicy("").Obj(), msgRestartPolicy),
		Entry("restartPolicy OnFailure with a podFailurePolicy",
			job().RestartPolicy(corev1.RestartPolicyOnFailure).PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).Obj(),
			msgRestartPolicyWithPFP),

		// Pod failure policy.
		Entry("21 podFailurePolicy rules", job().PodFailurePolicy(failurePolicyRules(21)...).Obj(), msgAtMost20Items),
		Entry("a podFailurePolicy rule with both onExitCodes and onPodConditions",
			job().PodFailurePolicy(batchv1.PodFailurePolicyRule{
				Action:          failJob,
				OnExitCodes:     harness.OnExitCodes(failJob, "", in, 1).OnExitCodes,
				OnPodConditions: harness.OnPodCondition(failJob, corev1.DisruptionTarget, corev1.ConditionTrue).OnPodConditions,
			}).Obj(), msgExactlyOneRequirement),
		Entry("a podFailurePolicy rule with neither onExitCodes nor onPodConditions",
			job().PodFailurePolicy(batchv1.PodFailurePolicyRule{Action: failJob}).Obj(), msgExactlyOneRequirement),
		Entry("unsorted exit codes", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 3, 1, 2)).Obj(), msgExitCodesSorted),
		Entry("duplicate exit codes", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1, 1, 2)).Obj(), "Duplicate value: 1"),
		Entry("exit code 0 with operator In", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 0, 1)).Obj(), msgZeroExitCodeWithIn),
		Entry("no exit code values", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", notIn)).Obj(), msgAtLeastOneItem),
		Entry("256 exit code values", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", notIn, exitCodes(0, 255)...)).Obj(), msgAtMost255Items),
		Entry("action FailIndex without backoffLimitPerIndex",
			job().PodFailurePolicy(harness.OnExitCodes(failIndex, "", in, 1)).Obj(), msgFailIndexNeedsPerIndex),
		Entry("an unknown action", job().PodFailurePolicy(harness.OnExitCodes("Retry", "", in, 1)).Obj(), msgUnsupported+`: "Retry"`),
		Entry("an unknown exit code operator", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", "Between", 1)).Obj(), msgUnsupported+`: "Between"`),
		Entry("onExitCodes naming a container the template does not have",
			job().PodFailurePolicy(harness.OnExitCodes(failJob, "sidecar", in, 1)).Obj(), msgUnknownContainer),
		Entry("an onPodConditions status other than True, False or Unknown",
			job().PodFailurePolicy(harness.OnPodCondition(ignore, corev1.DisruptionTarget, "Maybe")).Obj(), msgUnsupported+`: "Maybe"`),
		Entry("an onPodConditions pattern without a type",
			job().PodFailurePolicy(harness.OnPodCondition(ignore, "", corev1.ConditionTrue)).Obj(), msgAtLeastOneChar),

		// Named rules and retry delays (beyond batch/v1).
		Entry("a rule name with '-', which no condition reason may hold", named("exit-42"), msgRuleNameFormat),
		Entry("a rule name starting with a digit", named("42exit"), msgRuleNameFormat),
		Entry("a rule name ending with '_'", named("exit_"), msgRuleNameFormat),
		Entry("a rule name with a space", named("exit 42"), msgRuleNameFormat),
		Entry("a rule name of 64 characters", named(nameOfLength(64)), msgAtMost63Bytes),
		Entry("two rules of the same name",
			withRules(job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1), harness.OnExitCodes(count, "", in, 2)),
				func(r []v1alpha1.PodFailurePolicyRule) { r[0].Name, r[1].Name = "Same", "Same" }), msgRuleNamesUnique),
		Entry("a retryDelaySeconds on a FailJob rule", delayed(failJob, 10), msgRetryDelayAction),
		Entry("a retryDelaySeconds on a FailIndex rule", delayed(failIndex, 10), msgRetryDelayAction),
		Entry("a negative retryDelaySeconds", delayed(count, -1), msgNotNegative),
		Entry("a retryDelaySeconds above a day", delayed(ignore, 86401), "should be less than or equal to 86400"),
		Entry("a createRefusedDelaySeconds of 0, which would retry in a loop", createRefusedDelay(0), "should be greater than or equal to 1"),
		Entry("a createRefusedDelaySeconds above an hour", createRefusedDelay(3601), "should be less than or equal to 3600"),

		// Memory after an OOM kill.
		Entry("an onOOMKilled factorPercent of 100, which raises nothing", onOOMKilled(100, "1Gi"), "should be greater than or equal to 101"),
		Entry("an onOOMKilled factorPercent above 1000", onOOMKilled(1001, "1Gi"), "should be less than or equal to 1000"),
		Entry("an onOOMKilled maxMemory of 0", onOOMKilled(150, "0"), msgMaxMemoryPositive),
		Entry("a negative onOOMKilled maxMemory", onOOMKilled(150, "-1Gi"), msgMaxMemoryPositive),
		Entry("an onOOMKilled maxMemory above 64Ti", onOOMKilled(150, "65Ti"), msgMaxMemoryBound),

		// Pod replacement policy.
		Entry("podReplacementPolicy TerminatingOrFailed with a podFailurePolicy",
			job().PodReplacementPolicy(batchv1.TerminatingOrFailed).PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).Obj(),
			msgReplacementWithPFP),
		Entry("an unknown podReplacementPolicy", job().PodReplacementPolicy("Never").Obj(), msgUnsupported+`: "Never"`),
		Entry("terminatingTimeoutSeconds without podReplacementPolicy Failed", job().TerminatingTimeoutSeconds(60).Obj(), msgTerminatingTimeout),
		Entry("terminatingTimeoutSeconds under TerminatingOrFailed",
			job().PodReplacementPolicy(batchv1.TerminatingOrFailed).TerminatingTimeoutSeconds(60).Obj(), msgTerminatingTimeout),
		Entry("a negative terminatingTimeoutSeconds", job().PodReplacementPolicy(batchv1.Failed).TerminatingTimeoutSeconds(-1).Obj(),
			"spec.terminatingTimeoutSeconds: Invalid value: -1: spec.terminatingTimeoutSeconds in body should be greater than or equal to 0"),
		Entry("a terminatingTimeoutSeconds over a day", job().PodReplacementPolicy(batchv1.Failed).TerminatingTimeoutSeconds(86401).Obj(),
			"spec.terminatingTimeoutSeconds: Invalid value: 86401: spec.terminatingTimeoutSeconds in body should be less than or equal to 86400"),

		// Restarts together, retries in place.
		Entry("a RestartJob rule without maxRestarts", restartJob().Obj(), msgMaxRestartsExactly),
		Entry("maxRestarts without a RestartJob rule", job().MaxRestarts(2).Obj(), msgMaxRestartsExactly),
		Entry("maxRestarts with only Count rules", job().PodFailurePolicy(harness.OnExitCodes(count, "", in, 3)).MaxRestarts(2).Obj(), msgMaxRestartsExactly),
		Entry("a negative maxRestarts", restartJob().MaxRestarts(-1).Obj(), msgNotNegative),
		Entry("maxRestarts above 10000", restartJob().MaxRestarts(10001).Obj(), "should be less than or equal to 10000"),
		Entry("restartIndexes on a Count rule",
			job().PodFailurePolicy(harness.OnExitCodes(count, "", in, 3)).EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].RestartIndexes = v1alpha1.RestartAllIndexes }).Obj(),
			msgRestartIndexesAction),
		Entry("an unknown restartIndexes",
			restartJob().MaxRestarts(1).EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].RestartIndexes = "Completed" }).Obj(), msgUnsupported+`: "Completed"`),
		Entry("retry InPlace on a FailJob rule", retryInPlace(failJob).Obj(), msgInPlaceNeedsCount),
		Entry("retry InPlace on an Ignore rule", retryInPlace(ignore).Obj(), msgInPlaceNeedsCount),
		Entry("retry InPlace on an onPodConditions rule",
			job().PodFailurePolicy(harness.OnPodCondition(count, corev1.DisruptionTarget, corev1.ConditionTrue)).
				EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].Retry = v1alpha1.RetryInPlace }).Obj(), msgInPlaceNeedsCount),
		Entry("retry InPlace with retryDelaySeconds",
			retryInPlace(count).EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].RetryDelaySeconds = ptr.To[int32](5) }).Obj(), msgInPlaceNoDelay),
		Entry("an unknown retry", retryInPlace(count).EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].Retry = "SameNode" }).Obj(),
			msgUnsupported+`: "SameNode"`),

		// Node avoidance.
		Entry("an unknown nodeAvoidance mode", job().NodeAvoidance("Never", 0).Obj(), msgUnsupported+`: "Never"`),
		Entry("failedIndexesPerNode 0", func() *v1alpha1.IndexedBatchJob {
			j := job().NodeAvoidance(v1alpha1.NodeAvoidancePreferred, 0).Obj()
			j.Spec.NodeAvoidance.FailedIndexesPerNode = ptr.To[int32](0)
			return j
		}(), "should be greater than or equal to 1"),
		Entry("failedIndexesPerNode above 100000", job().NodeAvoidance(v1alpha1.NodeAvoidancePreferred, 100001).Obj(), msgAtMost100000),

		// Success policy.
		Entry("a successPolicy without rules", job().SuccessPolicy().Obj(), msgAtLeastOneItem),
		Entry("21 successPolicy rules", job().SuccessPolicy(successPolicyRules(21)...).Obj(), msgAtMost20Items),
		Entry("a successPolicy rule with neither succeededIndexes nor succeededCount",
			job().SuccessPolicy(batchv1.SuccessPolicyRule{}).Obj(), msgSuccessRuleEmpty),
		Entry("succeededCount above completions", job().Completions(4).SuccessPolicy(harness.SucceededCount(5)).Obj(), msgSucceededCountTooLarge),
		Entry("negative succeededCount", job().SuccessPolicy(harness.SucceededCount(-1)).Obj(), msgNotNegative),
		Entry("malformed succeededIndexes", job().SuccessPolicy(harness.SucceededIndexes("1-")).Obj(), msgSucceededIndexesFormat),
		Entry("succeededIndexes that are not numbers", job().SuccessPolicy(harness.SucceededIndexes("a,b")).Obj(), msgSucceededIndexesFormat),
		Entry("succeededIndexes beyond completions-1", job().Completions(4).SuccessPolicy(harness.SucceededIndexes("0,2-4")).Obj(), msgSucceededIndexesRange),
		Entry("indexes beyond completions-1", job().Completions(4).Indexes("1,4").Obj(), msgIndexesRange),
		Entry("indexes out of order", job().Completions(8).Indexes("3,1").Obj(), msgIndexesOrder),
		Entry("indexes with a reversed range", job().Completions(8).Indexes("5-2").Obj(), msgIndexesOrder),
		Entry("indexes that are not a list", job().Completions(8).Indexes("1;2").Obj(), msgIndexesFormat),
		Entry("empty indexes", job().Completions(8).Indexes("").Obj(), msgAtLeastOneChar),
		Entry("retryBackoff with the first delay above the cap", job().RetryBackoff(60, 10).Obj(), msgRetryBackoffOrder),
		Entry("a negative retryBackoff delay", job().RetryBackoff(-1, 10).Obj(), msgNotNegative),
		Entry("a retryBackoff cap above a day", job().RetryBackoff(1, 86401).Obj(), "should be less than or equal to 86400"),
		Entry("network.subdomain without enableDNSHostnames", withNetwork(v1alpha1.Network{Subdomain: ptr.To("workers")}), msgSubdomainNeedsDNS),
		Entry("network.subdomain with enableDNSHostnames false",
			withNetwork(v1alpha1.Network{EnableDNSHostnames: ptr.To(false), Subdomain: ptr.To("workers")}), msgSubdomainNeedsDNS),
		Entry("a network.subdomain starting with a digit", job().PeerDNS("1workers").Obj(), msgSubdomainFormat),
		Entry("a network.subdomain with a dot", job().PeerDNS("workers.ml").Obj(), msgSubdomainFormat),
		Entry("a network.subdomain with capitals", job().PeerDNS("Workers").Obj(), msgSubdomainFormat),
		Entry("a network.subdomain ending with '-'", job().PeerDNS("workers-").Obj(), msgSubdomainFormat),
		Entry("a network.subdomain of 64 characters", job().PeerDNS(nameOfLength(64)).Obj(), msgAtMost63Bytes),
		Entry("an empty network.subdomain", withNetwork(v1alpha1.Network{EnableDNSHostnames: ptr.To(true), Subdomain: ptr.To("")}),
			msgAtLeastOneChar),
		Entry("peer DNS named after a job whose name starts with a digit", job().Name("1job").PeerDNS("").Obj(), msgServiceNameFromJobName),
		Entry("peer DNS with a template subdomain other than network.subdomain",
			job().PeerDNS("workers").Subdomain("mine").Obj(), msgTemplateSubdomain),
		Entry("peer DNS with a template subdomain other than the job's name", job().PeerDNS("").Subdomain("mine").Obj(), msgTemplateSubdomain),
		Entry("a descending succeededIndexes range", job().SuccessPolicy(harness.SucceededIndexes("3-1")).Obj(), msgSucceededIndexesOrder),
		Entry("a succeededIndexes range from an index to itself", job().SuccessPolicy(harness.SucceededIndexes("2-2")).Obj(), msgSucceededIndexesOrder),
		Entry("unsorted succeededIndexes", job().SuccessPolicy(harness.SucceededIndexes("3,1")).Obj(), msgSucceededIndexesOrder),
		Entry("a repeated succeededIndexes index", job().SuccessPolicy(harness.SucceededIndexes("1,1")).Obj(), msgSucceededIndexesOrder),
		Entry("overlapping succeededIndexes ranges", job().SuccessPolicy(harness.SucceededIndexes("0-2,2-3")).Obj(), msgSucceededIndexesOrder),
		Entry("a succeededIndexes index too large for an integer",
			job().SuccessPolicy(harness.SucceededIndexes("0,99999999999999999999")).Obj(), msgSucceededIndexesRange),
		Entry("succeededIndexes longer than 4096 characters",
			job().Completions(100000).SuccessPolicy(harness.SucceededIndexes(strings.Repeat("1", 4097))).Obj(), "may not be more than 4096 bytes"),

		// Gang scheduling.
		Entry("a gang larger than parallelism", job().Parallelism(2).GangScheduling(3).Obj(), msgGangAboveParallelism),
		Entry("a gang larger than completions", job().Completions(2).Parallelism(4).GangScheduling(3).Obj(), msgGangAboveCompletions),
		Entry("a gang of 0 pods", func() *v1alpha1.IndexedBatchJob {
			j := job().Parallelism(4).Obj()
			j.Spec.GangScheduling = &v1alpha1.GangScheduling{MinCount: ptr.To[int32](0)}
			return j
		}(), "should be greater than or equal to 1"),
		Entry("a gang job whose template names a PodGroup", withTemplateSchedulingGroup(job().Parallelism(4).GangScheduling(0).Obj()), msgGangSchedulingGroup),

		// Names.
		Entry("a name with a dot, which is no DNS label", job().Name("my.job").Obj(), msgNameNotDNSLabel),
		Entry("a name whose last pod hostname is 64 characters",
			job().Name(nameOfLength(61)).Completions(100).Obj(), msgHostnameTooLong), // 61 + "-99"
		Entry("a 63-character name, whose hostname for index 0 is too long",
			job().Name(nameOfLength(63)).Completions(1).Obj(), msgHostnameTooLong),
		Entry("managedBy that is not a domain-prefixed path", job().ManagedBy("example.com/my controller").Obj(), msgManagedByFormat),
		Entry("managedBy without a domain prefix", job().ManagedBy("my-controller").Obj(), msgManagedByFormat),
		Entry("managedBy longer than 63 characters",
			job().ManagedBy("example.com/"+strings.Repeat("c", 52)).Obj(), msgAtMost63Bytes),
	)

	DescribeTable("accepts a valid job at creation",
		func(job *v1alpha1.IndexedBatchJob) {
			Expect(create(job)).To(Succeed())
		},

		Entry("the base job", job().Obj()),
		Entry("nodeAvoidance Required with failedIndexesPerNode", job().NodeAvoidance(v1alpha1.NodeAvoidanceRequired, 3).Obj()),
		Entry("zero completions", job().Completions(0).Obj()),
		Entry("100000 completions and parallelism 100000 without backoffLimitPerIndex",
			job().Completions(100000).Parallelism(100000).Obj()),
		Entry("more than 100000 completions without backoffLimitPerIndex",
			job().Completions(1000000).Parallelism(100000).Obj()),
		Entry("100001 completions with backoffLimitPerIndex, maxFailedIndexes 10000 and parallelism 10000",
			job().Completions(100001).Parallelism(10000).BackoffLimitPerIndex(1).MaxFailedIndexes(10000).Obj()),
		Entry("maxFailedIndexes equal to completions", job().Completions(4).BackoffLimitPerIndex(0).MaxFailedIndexes(4).Obj()),
		Entry("zero for every non-negative count",
			job().Parallelism(0).BackoffLimit(0).BackoffLimitPerIndex(0).MaxFailedIndexes(0).TTLSecondsAfterFinished(0).ActiveDeadlineSeconds(0).Obj()),
		Entry("restartPolicy OnFailure without a podFailurePolicy", job().RestartPolicy(corev1.RestartPolicyOnFailure).Obj()),
		Entry("the 255 exit codes 1 to 255", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, exitCodes(1, 255)...)).Obj()),
		Entry("20 podFailurePolicy rules", job().PodFailurePolicy(failurePolicyRules(20)...).Obj()),
		Entry("exit code 0 with operator NotIn", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", notIn, 0)).Obj()),
		Entry("a RestartJob rule with maxRestarts", restartJob().MaxRestarts(3).Obj()),
		Entry("a RestartJob rule with maxRestarts 0 and restartIndexes All",
			restartJob().MaxRestarts(0).EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].RestartIndexes = v1alpha1.RestartAllIndexes }).Obj()),
		Entry("a RestartJob rule on a pod condition", job().PodFailurePolicy(harness.OnPodCondition(restart, corev1.DisruptionTarget, corev1.ConditionTrue)).MaxRestarts(1).Obj()),
		Entry("retry InPlace on a Count rule", retryInPlace(count).Obj()),
		Entry("retry NewPod on an Ignore rule",
			job().PodFailurePolicy(harness.OnExitCodes(ignore, "", in, 3)).EditRules(func(r []v1alpha1.PodFailurePolicyRule) { r[0].Retry = v1alpha1.RetryNewPod }).Obj()),
		Entry("onExitCodes naming the template's container", job().PodFailurePolicy(harness.OnExitCodes(failJob, "main", in, 42)).Obj()),
		Entry("onExitCodes naming an init container", job().InitContainer("setup").PodFailurePolicy(harness.OnExitCodes(failJob, "setup", in, 42)).Obj()),
		Entry("an Ignore rule on the DisruptionTarget condition",
			job().PodFailurePolicy(harness.OnPodCondition(ignore, corev1.DisruptionTarget, corev1.ConditionTrue)).Obj()),
		Entry("every action, FailIndex together with backoffLimitPerIndex",
			job().BackoffLimitPerIndex(1).PodFailurePolicy(
				harness.OnExitCodes(failIndex, "", in, 1),
				harness.OnExitCodes(failJob, "", in, 2),
				harness.OnExitCodes(count, "", in, 3),
				harness.OnPodCondition(ignore, corev1.DisruptionTarget, corev1.ConditionUnknown),
			).Obj()),
		Entry("podReplacementPolicy Failed with a podFailurePolicy",
			job().PodReplacementPolicy(batchv1.Failed).PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).Obj()),
		Entry("rule names as upstream's examples write them", named("ExitCode42")),
		Entry("a rule name with '_'", named("bad_input")),
		Entry("a one-letter rule name", named("a")),
		Entry("a 63-character rule name", named(nameOfLength(63))),
		Entry("named and unnamed rules together",
			withRules(job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1), harness.OnExitCodes(count, "", in, 2), harness.OnExitCodes(count, "", in, 3)),
				func(r []v1alpha1.PodFailurePolicyRule) { r[1].Name = "Transient" })),
		Entry("20 named rules with retry delays, the most the policy holds",
			withRules(job().PodFailurePolicy(failurePolicyRules(20)...), func(r []v1alpha1.PodFailurePolicyRule) {
				for i := range r {
					r[i].Name, r[i].Action, r[i].RetryDelaySeconds = nameOfLength(60)+fmt.Sprintf("%03d", i), count, ptr.To[int32](86400)
				}
			})),
		Entry("a retryDelaySeconds of 0 on an Ignore rule", delayed(ignore, 0)),
		Entry("a retryDelaySeconds of a day on a Count rule", delayed(count, 86400)),
		Entry("a createRefusedDelaySeconds of 1", createRefusedDelay(1)),
		Entry("an onOOMKilled factorPercent of 101", onOOMKilled(101, "1Mi")),
		Entry("an onOOMKilled factorPercent of 1000 and a maxMemory of 64Ti", onOOMKilled(1000, "64Ti")),
		Entry("an onOOMKilled maxMemory in bytes", onOOMKilled(150, "1073741824")),
		Entry("a createRefusedDelaySeconds of an hour with the other retryBackoff fields", func() *v1alpha1.IndexedBatchJob {
			j := createRefusedDelay(3600)
			j.Spec.RetryBackoff.InitialDelaySeconds, j.Spec.RetryBackoff.MaxDelaySeconds = ptr.To[int32](5), ptr.To[int32](60)
			return j
		}()),
		Entry("podReplacementPolicy TerminatingOrFailed without a podFailurePolicy", job().PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj()),
		Entry("terminatingTimeoutSeconds under podReplacementPolicy Failed", job().PodReplacementPolicy(batchv1.Failed).TerminatingTimeoutSeconds(0).Obj()),
		Entry("terminatingTimeoutSeconds with a podFailurePolicy", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).TerminatingTimeoutSeconds(300).Obj()),
		Entry("20 successPolicy rules", job().SuccessPolicy(successPolicyRules(20)...).Obj()),
		Entry("succeededCount equal to completions", job().Completions(4).SuccessPolicy(harness.SucceededCount(4)).Obj()),
		Entry("succeededIndexes up to completions-1 with a succeededCount",
			job().Completions(4).SuccessPolicy(batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0,2-3"), SucceededCount: ptr.To[int32](2)}).Obj()),
		Entry("a name whose last pod hostname is exactly 63 characters",
			job().Name(nameOfLength(60)).Completions(100).Obj()), // 60 + "-99"
		Entry("a 63-character name with zero completions, which has no pods", job().Name(nameOfLength(63)).Completions(0).Obj()),
		Entry("indexes within completions", job().Completions(8).Indexes("1,2,5-7").Obj()),
		Entry("retryBackoff of zero delay", job().RetryBackoff(0, 0).Obj()),
		Entry("retryBackoff with only a cap", func() *v1alpha1.IndexedBatchJob {
			j := job().Obj()
			j.Spec.RetryBackoff = &v1alpha1.RetryBackoff{MaxDelaySeconds: ptr.To[int32](60)}
			return j
		}()),
		Entry("peer DNS named after the job", job().PeerDNS("").Obj()),
		Entry("peer DNS with network.subdomain", job().PeerDNS("workers").Obj()),
		Entry("peer DNS with a 63-character network.subdomain", job().PeerDNS(nameOfLength(63)).Obj()),
		Entry("peer DNS with network.subdomain for a job whose name starts with a digit", job().Name("1job").PeerDNS("workers").Obj()),
		Entry("peer DNS with the template subdomain equal to network.subdomain", job().PeerDNS("workers").Subdomain("workers").Obj()),
		Entry("peer DNS with the template subdomain equal to the job's name", job().PeerDNS("").Subdomain("job").Obj()),
		Entry("network with enableDNSHostnames false", withNetwork(v1alpha1.Network{EnableDNSHostnames: ptr.To(false)})),
		Entry("a template subdomain without peer DNS", job().Subdomain("mine").Obj()),
		Entry("gang scheduling of parallelism pods", job().Parallelism(4).GangScheduling(0).Obj()),
		Entry("gang scheduling of minCount pods", job().Parallelism(4).GangScheduling(2).Obj()),
		Entry("a template naming a PodGroup without gangScheduling", withTemplateSchedulingGroup(job().Obj())),
		Entry("managedBy naming this operator", job().ManagedBy(v1alpha1.ControllerName).Obj()),
		Entry("managedBy naming MultiKueue", job().ManagedBy("kueue.x-k8s.io/multikueue").Obj()),
		Entry("managedBy of exactly 63 characters", job().ManagedBy("example.com/"+strings.Repeat("c", 51)).Obj()),
	)

	DescribeTable("rejects an update",
		func(base *v1alpha1.IndexedBatchJob, change func(*v1alpha1.IndexedBatchJob), message string) {
			expectRejected(update(base, change), message)
		},

		Entry("of completions alone", job().Completions(4).Parallelism(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Completions = 5 }, msgCompletionsInTandem),
		Entry("of completions while suspended", suspendedJob().Completions(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Completions = 5 }, msgCompletionsInTandem),
		Entry("of completions to a value other than the new parallelism", job().Completions(4).Parallelism(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Completions = 8
				j.Spec.Parallelism = ptr.To[int32](6)
			}, msgCompletionsInTandem),
		Entry("of completions below an index the job lists", job().Completions(4).Parallelism(4).Indexes("1,3").Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Completions = 2
				j.Spec.Parallelism = ptr.To[int32](2)
			}, msgIndexesRange),
		Entry("of indexes", job().Completions(4).Indexes("1").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Indexes = ptr.To("2") }, msgIndexesImmutable),
		Entry("setting indexes", job().Completions(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Indexes = ptr.To("2") }, msgIndexesImmutable),
		Entry("enabling peer DNS", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Network = &v1alpha1.Network{EnableDNSHostnames: ptr.To(true)}
			}, msgNetworkImmutable),
		Entry("disabling peer DNS", job().PeerDNS("").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Network.EnableDNSHostnames = ptr.To(false) }, msgNetworkImmutable),
		Entry("removing network", job().PeerDNS("").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Network = nil }, msgNetworkImmutable),
		Entry("of network.subdomain", job().PeerDNS("workers").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Network.Subdomain = ptr.To("trainers") }, msgNetworkImmutable),
		Entry("enabling gangScheduling", job().Parallelism(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.GangScheduling = &v1alpha1.GangScheduling{} }, msgGangImmutable),
		Entry("removing gangScheduling", job().Parallelism(4).GangScheduling(0).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.GangScheduling = nil }, msgGangImmutable),
		Entry("of gangScheduling.minCount", job().Parallelism(4).GangScheduling(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.GangScheduling.MinCount = ptr.To[int32](3) }, msgGangImmutable),
		Entry("of parallelism below the gang's minCount", job().Parallelism(4).GangScheduling(3).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Parallelism = ptr.To[int32](2) }, msgGangAboveParallelism),
		Entry("of maxRestarts", restartJob().MaxRestarts(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.MaxRestarts = ptr.To[int32](5) }, msgMaxRestartsImmutable),
		Entry("of managedBy", job().ManagedBy("example.com/a").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.ManagedBy = ptr.To("example.com/b") }, "managedBy is immutable"),
		Entry("setting managedBy", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.ManagedBy = ptr.To("example.com/b") }, "managedBy is immutable"),
		Entry("clearing managedBy", job().ManagedBy("example.com/a").Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.ManagedBy = nil }, "managedBy is immutable"),
		Entry("adding a podFailurePolicy", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.PodFailurePolicy = job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).Obj().Spec.PodFailurePolicy
			}, "podFailurePolicy is immutable"),
		Entry("naming a podFailurePolicy rule", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.PodFailurePolicy.Rules[0].Name = "Fatal" }, "podFailurePolicy is immutable"),
		Entry("of a podFailurePolicy rule", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.PodFailurePolicy.Rules[0].Action = ignore }, "podFailurePolicy is immutable"),
		Entry("adding a successPolicy", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: []batchv1.SuccessPolicyRule{harness.SucceededCount(1)}}
			}, "successPolicy is immutable"),
		Entry("of a successPolicy rule", job().SuccessPolicy(harness.SucceededCount(1)).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.SuccessPolicy.Rules[0].SucceededCount = ptr.To[int32](2) }, "successPolicy is immutable"),
		Entry("of backoffLimitPerIndex", job().BackoffLimitPerIndex(1).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.BackoffLimitPerIndex = ptr.To[int32](2) }, "backoffLimitPerIndex is immutable"),
		Entry("setting backoffLimitPerIndex", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.BackoffLimitPerIndex = ptr.To[int32](2) }, "backoffLimitPerIndex is immutable"),
		Entry("of podReplacementPolicy", job().PodReplacementPolicy(batchv1.Failed).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed) },
			"podReplacementPolicy is immutable"),
		Entry("setting podReplacementPolicy", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed) }, "podReplacementPolicy is immutable"),
		Entry("of a container image while running", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Template.Spec.Containers[0].Image = "example.com/other:1" }, msgTemplateImmutable),
		Entry("of a container image while running, in the containers' rule too", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Template.Spec.Containers[0].Image = "example.com/other:1" }, msgContainersChanged),
		// A suspended job's other container fields are the webhook's to
		// refuse (test/integration/webhook): CEL checks names and order.
		Entry("renaming a container while suspended", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Template.Spec.Containers[0].Name = "other" }, msgContainersChanged),
		Entry("adding a container while suspended", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.Containers = append(j.Spec.Template.Spec.Containers, corev1.Container{Name: "sidecar", Image: harness.DefaultImage})
			}, msgContainersChanged),
		Entry("adding an init container while suspended", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: harness.DefaultImage}}
			}, msgInitContainersChanged),
		Entry("of a container's resources while running", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			}, msgContainersChanged),
		Entry("of the template's nodeSelector while running", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.NodeSelector = map[string]string{zoneLabel: "b"}
			}, msgTemplateImmutable),
		Entry("of the template's labels while running", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Template.Labels = map[string]string{"team": "b"} }, msgTemplateImmutable),
		Entry("of the template's nodeSelector in the update that suspends the job", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Suspend = ptr.To(true)
				j.Spec.Template.Spec.NodeSelector = map[string]string{zoneLabel: "b"}
			}, msgTemplateImmutable),
		Entry("that makes an otherwise valid field invalid: maxFailedIndexes above completions",
			job().BackoffLimitPerIndex(1).MaxFailedIndexes(1).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.MaxFailedIndexes = ptr.To[int32](5) }, msgMaxFailedAboveCompletion),
	)

	DescribeTable("accepts an update",
		func(base *v1alpha1.IndexedBatchJob, change func(*v1alpha1.IndexedBatchJob)) {
			Expect(update(base, change)).To(Succeed())
		},

		Entry("that changes nothing", job().PodFailurePolicy(harness.OnExitCodes(failJob, "", in, 1)).SuccessPolicy(harness.SucceededCount(1)).Obj(),
			func(*v1alpha1.IndexedBatchJob) {}),
		Entry("that sets nodeAvoidance on a running job", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.NodeAvoidance = &v1alpha1.NodeAvoidance{Mode: v1alpha1.NodeAvoidanceRequired, FailedIndexesPerNode: ptr.To[int32](2)}
			}),
		Entry("of the template's nodeSelector while suspended", suspendedJob().NodeSelector(zoneLabel, "a").Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.NodeSelector = map[string]string{zoneLabel: "b"}
			}),
		Entry("of the template's tolerations while suspended", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.Tolerations = []corev1.Toleration{{Key: "gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
			}),
		Entry("of the template's labels while suspended", suspendedJob().PodLabel("team", "a").Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Labels = map[string]string{"team": "b", "queue": "q"}
			}),
		Entry("of the template's annotations while suspended", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Annotations = map[string]string{"example.com/note": "x"}
			}),
		Entry("of the template's scheduling directives in the update that resumes the job", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Suspend = ptr.To(false)
				j.Spec.Template.Spec.NodeSelector = map[string]string{zoneLabel: "b"}
				j.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/gate"}}
			}),
		Entry("of a container's resources while suspended (KEP-5440)", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.Containers[0].Resources = corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("1Gi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
				}
			}),
		Entry("of an init container's resources while suspended", suspendedJob().InitContainer("setup").Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Template.Spec.InitContainers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			}),
		Entry("of resources and scheduling directives together in the update that resumes the job (Kueue's start)", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Suspend = ptr.To(false)
				j.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
				j.Spec.Template.Spec.NodeSelector = map[string]string{"pool": "a"}
			}),
		Entry("of parallelism", job().Parallelism(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Parallelism = ptr.To[int32](3) }),
		Entry("of parallelism of a job with peer DNS, network unchanged", job().PeerDNS("workers").Parallelism(2).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Parallelism = ptr.To[int32](3) }),
		Entry("suspending the job", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Suspend = ptr.To(true) }),
		Entry("resuming the job", suspendedJob().Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.Suspend = ptr.To(false) }),
		Entry("of backoffLimit, activeDeadlineSeconds and ttlSecondsAfterFinished", job().Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.BackoffLimit = ptr.To[int32](2)
				j.Spec.ActiveDeadlineSeconds = ptr.To[int64](60)
				j.Spec.TTLSecondsAfterFinished = ptr.To[int32](30)
			}),
		Entry("of maxFailedIndexes", job().BackoffLimitPerIndex(1).MaxFailedIndexes(1).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.MaxFailedIndexes = ptr.To[int32](2) }),
		Entry("of completions together with parallelism, up (an elastic job)", job().Completions(4).Parallelism(4).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Completions = 8
				j.Spec.Parallelism = ptr.To[int32](8)
			}),
		Entry("of completions together with parallelism, down", job().Completions(8).Parallelism(8).BackoffLimitPerIndex(1).Obj(),
			func(j *v1alpha1.IndexedBatchJob) {
				j.Spec.Completions = 2
				j.Spec.Parallelism = ptr.To[int32](2)
			}),
		Entry("of retryBackoff", job().RetryBackoff(10, 600).Obj(),
			func(j *v1alpha1.IndexedBatchJob) { j.Spec.RetryBackoff.InitialDelaySeconds = ptr.To[int32](0) }),
	)

	// A quantity may be written as a JSON number, which typed Go clients
	// never send: the maxMemory rules must read it too.
	It("judges an onOOMKilled maxMemory written as a number", func() {
		for _, tc := range []struct {
			bytes int64
			ok    bool
		}{{1 << 30, true}, {0, false}} {
			raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(onOOMKilled(150, "1Gi"))
			Expect(err).NotTo(HaveOccurred())
			u := &unstructured.Unstructured{Object: raw}
			u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("IndexedBatchJob"))
			u.SetName(fmt.Sprintf("oom-bytes-%d", tc.bytes))
			Expect(unstructured.SetNestedField(u.Object, tc.bytes, "spec", "retryResources", "onOOMKilled", "maxMemory")).To(Succeed())
			err = k8sClient.Create(ctx, u)
			if tc.ok {
				Expect(err).NotTo(HaveOccurred())
				Expect(k8sClient.Delete(ctx, u)).To(Succeed())
			} else {
				expectRejected(err, msgMaxMemoryPositive)
			}
		}
	})

	// kubectl users often leave out the template's metadata, which typed Go
	// clients always send (as {}); adding labels later must still be allowed.
	It("accepts labels added while suspended to a template that had no metadata", func() {
		raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(suspendedJob().Obj())
		Expect(err).NotTo(HaveOccurred())
		u := &unstructured.Unstructured{Object: raw}
		u.SetGroupVersionKind(v1alpha1.GroupVersion.WithKind("IndexedBatchJob"))
		unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata")
		Expect(k8sClient.Create(ctx, u)).To(Succeed())
		DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, u))).To(Succeed()) })

		stored := &unstructured.Unstructured{}
		stored.SetGroupVersionKind(u.GroupVersionKind())
		Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(u), stored)).To(Succeed())
		_, found, err := unstructured.NestedFieldNoCopy(stored.Object, "spec", "template", "metadata")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeFalse(), "precondition: the stored template has no metadata")

		Expect(unstructured.SetNestedStringMap(stored.Object, map[string]string{"queue": "q"}, "spec", "template", "metadata", "labels")).To(Succeed())
		Expect(k8sClient.Update(ctx, stored)).To(Succeed())
	})
})
