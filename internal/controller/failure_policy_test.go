package controller

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestFailurePolicyMatching(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").InitContainer("setup").Container("sidecar").Obj()
	const (
		failJob   = batchv1.PodFailurePolicyActionFailJob
		failIndex = batchv1.PodFailurePolicyActionFailIndex
		ignore    = batchv1.PodFailurePolicyActionIgnore
		count     = batchv1.PodFailurePolicyActionCount
		in        = batchv1.PodFailurePolicyOnExitCodesOpIn
		notIn     = batchv1.PodFailurePolicyOnExitCodesOpNotIn
	)
	exit := func(code int32) *jobpod.Pod { return makePod(job, 0).failedAt(testNow, code).obj() }
	cases := []struct {
		name   string
		policy *ibjv1.PodFailurePolicy
		pod    *jobpod.Pod
		want   batchv1.PodFailurePolicyAction
	}{
		{"no policy counts", nil, exit(3), count},
		{"no rule matches counts", policyOf(harness.OnExitCodes(failJob, "", in, 42)), exit(3), count},
		{"In matches", policyOf(harness.OnExitCodes(failJob, "", in, 3, 42)), exit(42), failJob},
		{"NotIn matches another code", policyOf(harness.OnExitCodes(ignore, "", notIn, 1, 2)), exit(3), ignore},
		{"NotIn skips a listed code", policyOf(harness.OnExitCodes(ignore, "", notIn, 1, 3)), exit(3), count},
		{"first match wins", policyOf(
			harness.OnExitCodes(ignore, "", in, 42),
			harness.OnExitCodes(failJob, "", in, 42),
		), exit(42), ignore},
		{"a rule that does not match lets the next one decide", policyOf(
			harness.OnExitCodes(failJob, "", in, 1),
			harness.OnExitCodes(failIndex, "", in, 42),
		), exit(42), failIndex},
		{"explicit Count stops the search", policyOf(
			harness.OnExitCodes(count, "", in, 42),
			harness.OnExitCodes(failJob, "", in, 42),
		), exit(42), count},
		{"containerName restricts the match", policyOf(harness.OnExitCodes(failJob, "sidecar", in, 42)), exit(42), count},
		{"containerName matches its container",
			policyOf(harness.OnExitCodes(failJob, "sidecar", in, 42)),
			makePod(job, 0).failedAt(testNow, 0).containerExit("sidecar", 42, testNow).obj(), failJob},
		{"a container the template does not name (injected at admission) never matches",
			policyOf(harness.OnExitCodes(failJob, "", in, 137)),
			makePod(job, 0).failedAt(testNow, 0).containerExit("istio-proxy", 137, testNow).obj(), count},
		{"nor when a rule names it",
			policyOf(harness.OnExitCodes(failJob, "istio-proxy", notIn, 0)),
			makePod(job, 0).failedAt(testNow, 0).containerExit("istio-proxy", 137, testNow).obj(), count},
		{"init containers are matched",
			policyOf(harness.OnExitCodes(failJob, "", in, 7)),
			makePod(job, 0).initFailedAt(testNow, "setup", 7).obj(), failJob},
		{"init container matched by name",
			policyOf(harness.OnExitCodes(failIndex, "setup", in, 7)),
			makePod(job, 0).initFailedAt(testNow, "setup", 7).obj(), failIndex},
		{"zero exit code never matches NotIn",
			policyOf(harness.OnExitCodes(failJob, "sidecar", notIn, 1)),
			makePod(job, 0).failedAt(testNow, 5).containerExit("sidecar", 0, testNow).obj(), count},
		{"zero exit code never matches In, even listed",
			policyOf(harness.OnExitCodes(failJob, "", in, 0)), exit(0), count},
		{"a running container does not match",
			policyOf(harness.OnExitCodes(failJob, "", notIn, 1)),
			makePod(job, 0).running().failedWithoutStatus().obj(), count},
		{"pod condition with default status True",
			policyOf(batchv1.PodFailurePolicyRule{Action: ignore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}),
			makePod(job, 0).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionTrue).obj(), ignore},
		{"pod condition with another status does not match the default",
			policyOf(batchv1.PodFailurePolicyRule{Action: ignore, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget}}}),
			makePod(job, 0).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionFalse).obj(), count},
		{"pod condition with an explicit status",
			policyOf(harness.OnPodCondition(failJob, corev1.DisruptionTarget, corev1.ConditionFalse)),
			makePod(job, 0).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionFalse).obj(), failJob},
		{"unknown action is skipped", policyOf(
			harness.OnExitCodes("FailEverything", "", in, 42),
			harness.OnExitCodes(ignore, "", in, 42),
		), exit(42), ignore},
		{"rule without a requirement is skipped", policyOf(
			batchv1.PodFailurePolicyRule{Action: failJob},
			harness.OnExitCodes(ignore, "", in, 42),
		), exit(42), ignore},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := actionOf(matchFailurePolicy(tc.policy, tc.pod)); got != tc.want {
				t.Errorf("action = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestFailJobMessageNamesPodContainerAndRule(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	pod := makePod(job, 2).failedAt(testNow, 42).obj()
	policy := policyOf(
		harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 1),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
	)
	v := matchFailurePolicy(policy, pod)
	want := "Container main for pod ns/a-2-0 failed with exit code 42 matching FailJob rule at index 1"
	if v.Message != want {
		t.Errorf("message = %q, want %q", v.Message, want)
	}

	pod = makePod(job, 2).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionTrue).obj()
	v = matchFailurePolicy(policyOf(harness.OnPodCondition(batchv1.PodFailurePolicyActionFailJob, corev1.DisruptionTarget, corev1.ConditionTrue)), pod)
	if !strings.Contains(v.Message, "ns/a-2-0") || !strings.Contains(v.Message, "DisruptionTarget") {
		t.Errorf("message = %q, want it to name the pod and the condition", v.Message)
	}
}

// matchFailurePolicy is the rule that matches a cached pod of a job with
// policy, whose template has init container setup and containers main and
// sidecar; nil for none.
func matchFailurePolicy(policy *ibjv1.PodFailurePolicy, pod *jobpod.Pod) *jobpod.Match {
	job := harness.MakeIndexedBatchJob("a", "ns").InitContainer("setup").Container("sidecar").Obj()
	job.Spec.PodFailurePolicy = policy
	return jobpod.MatchPolicy(job, pod)
}

// actionOf is the action taken on a failure: Count where no rule matched.
func actionOf(m *jobpod.Match) batchv1.PodFailurePolicyAction {
	if m == nil {
		return batchv1.PodFailurePolicyActionCount
	}
	return m.Action
}

// verdict is what TestClassifyFailure compares of a jobpod.Failure.
type verdict struct {
	failed, ignored, counted, failsIndex bool
	failsJob                             string
}

func verdictOf(f jobpod.Failure) verdict {
	v := verdict{failed: f.Failed, ignored: f.Ignored, counted: f.Counted, failsIndex: f.FailsIndex}
	if m := f.FailsJob(); m != nil {
		v.failsJob = m.Message
	}
	return v
}

// policyOf is a podFailurePolicy of the batch/v1 rules, unnamed.
func policyOf(rules ...batchv1.PodFailurePolicyRule) *ibjv1.PodFailurePolicy {
	return harness.MakeIndexedBatchJob("a", "ns").PodFailurePolicy(rules...).Obj().Spec.PodFailurePolicy
}

// nameRules names the job's podFailurePolicy rules in order; "" leaves a
// rule unnamed.
func nameRules(job *ibjv1.IndexedBatchJob, names ...string) *ibjv1.IndexedBatchJob {
	for i, name := range names {
		job.Spec.PodFailurePolicy.Rules[i].Name = name
	}
	return job
}

// delayRule sets the retryDelaySeconds of the job's podFailurePolicy rule i.
func delayRule(job *ibjv1.IndexedBatchJob, i int, seconds int32) *ibjv1.IndexedBatchJob {
	job.Spec.PodFailurePolicy.Rules[i].RetryDelaySeconds = ptr.To(seconds)
	return job
}

func TestClassifyFailure(t *testing.T) {
	policy := []batchv1.PodFailurePolicyRule{
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 43),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 44),
	}
	perIndex := harness.MakeIndexedBatchJob("a", "ns").BackoffLimitPerIndex(1).PodFailurePolicy(policy...).Obj()
	global := harness.MakeIndexedBatchJob("a", "ns").PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj()
	failed := func(job *ibjv1.IndexedBatchJob, earlierFailures, code int32) *jobpod.Pod {
		return makePodFor(job, podbuild.Spec{Attempt: earlierFailures, Failures: earlierFailures}).failedAt(testNow, code).obj()
	}
	failJobMessage := "Container main for pod ns/a-0-1 failed with exit code 42 matching FailJob rule at index 0"
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		pod  *jobpod.Pod
		want verdict
	}{
		{"running", perIndex, makePod(perIndex, 0).running().obj(), verdict{}},
		{"succeeded", perIndex, makePod(perIndex, 0).succeededAt(testNow).obj(), verdict{}},
		{"discarded", perIndex, makePod(perIndex, 0).failedAt(testNow, 1).discarded().obj(), verdict{}},
		{"counted, index under its limit", perIndex, failed(perIndex, 0, 1), verdict{failed: true, counted: true}},
		{"counted, index over its limit", perIndex, failed(perIndex, 1, 1), verdict{failed: true, counted: true, failsIndex: true}},
		{"FailJob under the limit", perIndex, failed(perIndex, 0, 42), verdict{failed: true, counted: true,
			failsJob: "Container main for pod ns/a-0-0 failed with exit code 42 matching FailJob rule at index 0"}},
		{"FailJob over the limit fails the index too", perIndex, failed(perIndex, 1, 42), verdict{failed: true, counted: true, failsIndex: true, failsJob: failJobMessage}},
		{"FailIndex", perIndex, failed(perIndex, 0, 43), verdict{failed: true, counted: true, failsIndex: true}},
		{"Ignore, even over the limit", perIndex, failed(perIndex, 1, 44), verdict{failed: true, ignored: true}},
		{"terminating under Failed replacement is not failed yet", perIndex, makePod(perIndex, 0).running().deletedAt(testNow).obj(), verdict{}},
		{"terminating under TerminatingOrFailed is failed", global, makePod(global, 0).running().deletedAt(testNow).obj(), verdict{failed: true, counted: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, verdictOf(jobpod.Classify(tc.job, tc.pod)), cmp.AllowUnexported(verdict{})); diff != "" {
				t.Errorf("classifyFailure (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFailedIndexIsDecidedAlikeWhenRecordedAndWhenRebuilt holds the two
// places that decide whether a failed pod fails its index to one answer:
// recording the pod, and rebuilding failedIndexes from the pods after the
// status was found unreadable. They once disagreed on a FailJob match.
func TestFailedIndexIsDecidedAlikeWhenRecordedAndWhenRebuilt(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).BackoffLimitPerIndex(1).PodFailurePolicy(
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 43),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 44),
	).Obj()
	cases := []struct {
		name            string
		earlierFailures int32
		exitCode        int32
		want            string
	}{
		{"Count under the limit", 0, 1, ""},
		{"Count over the limit", 1, 1, "0"},
		{"FailJob under the limit", 0, 42, ""},
		{"FailJob over the limit", 1, 42, "0"},
		{"FailIndex", 0, 43, "0"},
		{"Ignore over the limit", 1, 44, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := makePodFor(job, podbuild.Spec{Attempt: tc.earlierFailures, Failures: tc.earlierFailures}).failedAt(testNow, tc.exitCode)
			recorded := syncOnce(job.DeepCopy(), pod.obj())

			unreadable := job.DeepCopy()
			unreadable.Status.FailedIndexes = ptr.To("not an index set")
			rebuilt := syncOnce(unreadable, pod.withoutFinalizer().obj())

			if got := ptr.Deref(recorded.status.FailedIndexes, "<nil>"); got != tc.want {
				t.Errorf("failedIndexes when the pod is recorded = %q, want %q", got, tc.want)
			}
			if got := ptr.Deref(rebuilt.status.FailedIndexes, "<nil>"); got != tc.want {
				t.Errorf("failedIndexes rebuilt from the pods = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWhyFailedNamesWhatFailedTheIndex(t *testing.T) {
	const in = batchv1.PodFailurePolicyOnExitCodesOpIn
	job := harness.MakeIndexedBatchJob("a", "ns").BackoffLimitPerIndex(1).PodReplacementPolicy(batchv1.TerminatingOrFailed).PodFailurePolicy(
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", in, 43),
		harness.OnPodCondition(batchv1.PodFailurePolicyActionFailIndex, corev1.DisruptionTarget, corev1.ConditionTrue),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, 42),
	).Obj()
	named := nameRules(job.DeepCopy(), "bad_input", "", "Fatal")
	overLimit := podbuild.Spec{Attempt: 1, Failures: 1}
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		pod  *jobpod.Pod
		want string
	}{
		{"an exit code rule", job, makePod(job, 0).failedAt(testNow, 43).obj(), "exit code 43 of container main matched rule 0 (FailIndex)"},
		{"a condition rule", job, makePod(job, 0).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionTrue).obj(),
			"condition DisruptionTarget matched rule 1 (FailIndex)"},
		{"the limit, after a FailJob match", job, makePodFor(job, overLimit).failedAt(testNow, 42).obj(),
			"exit code 42 of container main matched rule 2 (FailJob); backoffLimitPerIndex reached"},
		{"the limit", job, makePodFor(job, overLimit).failedAt(testNow, 1).obj(), "exit code 1 of container main; backoffLimitPerIndex reached"},
		{"the limit, deleted", job, makePodFor(job, overLimit).running().deletedAt(testNow).obj(), "deleted before it succeeded; backoffLimitPerIndex reached"},
		{"a named FailIndex rule gives its reason", named, makePod(named, 0).failedAt(testNow, 43).obj(),
			`exit code 43 of container main matched rule 0 "bad_input" (FailIndex): reason PodFailurePolicy_bad_input`},
		{"an unnamed rule among named ones", named, makePod(named, 0).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionTrue).obj(),
			"condition DisruptionTarget matched rule 1 (FailIndex)"},
		{"the limit, after a named FailJob match", named, makePodFor(named, overLimit).failedAt(testNow, 42).obj(),
			`exit code 42 of container main matched rule 2 "Fatal" (FailJob); backoffLimitPerIndex reached`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := jobpod.Classify(tc.job, tc.pod)
			if !f.FailsIndex {
				t.Fatalf("classifyFailure = %+v, want the index failed", f)
			}
			if got := whyFailed(tc.job, tc.pod, f); got != tc.want {
				t.Errorf("whyFailed = %q, want %q", got, tc.want)
			}
		})
	}
}
