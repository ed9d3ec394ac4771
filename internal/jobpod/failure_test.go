package jobpod

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestMatchPolicyOnAPod(t *testing.T) {
	terminated := func(name string, code int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code}}}
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}, Status: corev1.PodStatus{
		Phase:                 corev1.PodFailed,
		InitContainerStatuses: []corev1.ContainerStatus{terminated("setup", 5)},
		ContainerStatuses:     []corev1.ContainerStatus{terminated("sidecar", 0), terminated("main", 42)},
		Conditions:            []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionFalse}},
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
		{"an unknown action is passed over", []batchv1.PodFailurePolicyRule{
			harness.OnExitCodes("FailEverything", "", in, 42),
			harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", in, 42),
		}, "Container main for pod ns/p failed with exit code 42 matching Count rule at index 1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			ended := Read(pod)
			if m := MatchPolicy(&batchv1.PodFailurePolicy{Rules: tc.rules}, ended); m != nil {
				got = m.Message
			}
			if got != tc.want {
				t.Errorf("match %q, want %q", got, tc.want)
			}
		})
	}
}
