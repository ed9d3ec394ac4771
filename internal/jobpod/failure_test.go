package jobpod

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestMatchPolicyOnAPod(t *testing.T) {
	terminated := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: corev1.PodStatus{
		Phase:                 corev1.PodFailed,
		InitContainerStatuses: []corev1.ContainerStatus{terminated("setup", 5)},
		// istio-proxy is no container of the template: admission injected it.
		ContainerStatuses: []corev1.ContainerStatus{terminated("sidecar", 0), terminated("main", 42), terminated("istio-proxy", 137)},
		Conditions:        []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}},
	}}
	const (
		in    = batchv1.PodFailurePolicyOnExitCodesOpIn
		notIn = batchv1.PodFailurePolicyOnExitCodesOpNotIn
	)
	cases := []struct {
		name  string
		rules []batchv1.PodFailurePolicyRule
		want  string // the message, "" when no rule matches
	}{
		{"no rules", nil, ""},
		{"init containers are looked at first", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", notIn, 1),
		}, "Container setup for pod ns/p failed with exit code 5 matching FailJob rule at index 0"},
		{"a container name narrows the match", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", notIn, 1),
		}, "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0"},
		{"a container that exited 0 never matches", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "sidecar", notIn, 1),
		}, ""},
		{"a condition pattern matches only its status", []batchv1.PodFailurePolicyRule{
			harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue),
		}, ""},
		{"a condition pattern with its status", []batchv1.PodFailurePolicyRule{
			harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionFalse),
		}, "Pod ns/p has condition DisruptionTarget matching Ignore rule at index 0"},
		{"an injected container's exit never matches", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, 137),
		}, ""},
		{"nor when the rule names it", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "istio-proxy", notIn, 0),
		}, ""},
		{"an unknown action is passed over", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes("FailEverything", "", in, 42),
			harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", in, 42),
		}, "Container main for pod ns/p failed with exit code 42 matching Count rule at index 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			ended := Read(pod)
			job := harness.MakeIndexedBatchJob("a", "ns").InitContainer("setup").Container("sidecar").PodFailurePolicy(tc.rules...).Obj()
			if m := MatchPolicy(job, ended); m != nil {
				got = m.Message
			}
			if got != tc.want {
				t.Errorf("match %q, want %q", got, tc.want)
			}
		})
	}
}

// A match carries its rule's name, the reason that name gives, and its
// retry delay, which only Count and Ignore rules have.
func TestMatchPolicyCarriesTheRuleNameAndRetryDelay(t *testing.T) {
	pod := Read(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: corev1.PodStatus{
		Phase:             corev1.PodFailed,
		ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 42}}}},
	}})
	rule := func(name string, action batchv1.PodFailurePolicyAction, delay *int32) ibjv1.PodFailurePolicyRule {
		return ibjv1.PodFailurePolicyRule{Name: name, Action: action, RetryDelaySeconds: delay,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{42}}}
	}
	cases := []struct {
		name       string
		rule       ibjv1.PodFailurePolicyRule
		wantReason string
		wantDelay  *time.Duration
	}{
		{"unnamed FailJob", rule("", batchv1.PodFailurePolicyActionFailJob, nil), "PodFailurePolicy", nil},
		{"named FailIndex", rule("bad_input", batchv1.PodFailurePolicyActionFailIndex, nil), "PodFailurePolicy_bad_input", nil},
		{"Count with a delay", rule("Transient", batchv1.PodFailurePolicyActionCount, ptr.To[int32](30)), "PodFailurePolicy_Transient", ptr.To(30 * time.Second)},
		{"Ignore with a zero delay", rule("", batchv1.PodFailurePolicyActionIgnore, ptr.To[int32](0)), "PodFailurePolicy", ptr.To(time.Duration(0))},
		// Only a CRD without its validation lets a FailJob rule have a delay.
		{"FailJob's delay is not read", rule("x", batchv1.PodFailurePolicyActionFailJob, ptr.To[int32](30)), "PodFailurePolicy_x", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Obj()
			job.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{tc.rule}}
			m := MatchPolicy(job, pod)
			if m == nil {
				t.Fatal("no match")
			}
			if m.Name != tc.rule.Name || m.Reason() != tc.wantReason {
				t.Errorf("name %q reason %q, want %q %q", m.Name, m.Reason(), tc.rule.Name, tc.wantReason)
			}
			if diff := cmp.Diff(tc.wantDelay, m.RetryDelay); diff != "" {
				t.Errorf("retry delay (-want +got):\n%s", diff)
			}
		})
	}
}
