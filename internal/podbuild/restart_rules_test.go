package podbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

const (
	in    = batchv1.PodFailurePolicyOnExitCodesOpIn
	notIn = batchv1.PodFailurePolicyOnExitCodesOpNotIn
	count = batchv1.PodFailurePolicyActionCount
)

// restart is a Restart rule on the codes, In unless notIn.
func restart(notIn bool, codes ...int32) corev1.ContainerRestartRule {
	op := corev1.ContainerRestartRuleOnExitCodesOpIn
	if notIn {
		op = corev1.ContainerRestartRuleOnExitCodesOpNotIn
	}
	return corev1.ContainerRestartRule{Action: corev1.ContainerRestartRuleActionRestart,
		ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: op, Values: codes}}
}

// upTo is 1..n without the skipped codes.
func upTo(n int32, skip ...int32) []int32 {
	var out []int32
	for code := int32(1); code <= n; code++ {
		if !contains(skip, code) {
			out = append(out, code)
		}
	}
	return out
}

func contains(codes []int32, c int32) bool {
	for _, x := range codes {
		if x == c {
			return true
		}
	}
	return false
}

func TestRestartRulesOfRetryInPlace(t *testing.T) {
	// manyRules are 19 FailJob rules on 255 codes each, 1000..5844, then
	// an InPlace NotIn [] rule: the codes it restarts on are every code
	// but those and 0, more than a NotIn rule takes.
	var manyRules []batchv1.PodFailurePolicyRule
	for r := range int32(19) {
		var codes []int32
		for v := range int32(255) {
			codes = append(codes, 1000+r*255+v)
		}
		manyRules = append(manyRules, harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, codes...))
	}
	// bigNotIn is an InPlace NotIn rule after a FailJob rule on the codes
	// 1..200 and another on 201..255 and 300..499: 456 codes and 0.
	bigNotIn := []batchv1.PodFailurePolicyRule{
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, upTo(200)...),
		harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, append(upTo(255, upTo(200)...), upTo(499, upTo(299)...)...)...),
		harness.OnExitCodes(count, "", notIn),
	}
	cases := []struct {
		name    string
		rules   []batchv1.PodFailurePolicyRule
		inPlace []int
		// want are the rules of each container, main and side.
		want map[string][]corev1.ContainerRestartRule
	}{
		{name: "no InPlace rule: containers untouched",
			rules: []batchv1.PodFailurePolicyRule{harness.OnExitCodes(count, "", in, 3)},
			want:  map[string][]corev1.ContainerRestartRule{"main": nil, "side": nil}},
		{name: "an In rule, on every container",
			rules:   []batchv1.PodFailurePolicyRule{harness.OnExitCodes(count, "", in, 3, 4)},
			inPlace: []int{0},
			want:    map[string][]corev1.ContainerRestartRule{"main": {restart(false, 3, 4)}, "side": {restart(false, 3, 4)}}},
		{name: "an earlier FailJob rule still ends the pod on its code",
			rules: []batchv1.PodFailurePolicyRule{
				harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, 42),
				harness.OnExitCodes(count, "", in, 3, 42),
			},
			inPlace: []int{1},
			want:    map[string][]corev1.ContainerRestartRule{"main": {restart(false, 3)}, "side": {restart(false, 3)}}},
		{name: "NotIn always holds 0, and the codes of earlier rules",
			rules: []batchv1.PodFailurePolicyRule{
				harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", in, 7),
				harness.OnExitCodes(count, "", notIn, 1),
			},
			inPlace: []int{1},
			want:    map[string][]corev1.ContainerRestartRule{"main": {restart(true, 0, 1, 7)}, "side": {restart(true, 0, 1, 7)}}},
		{name: "an earlier NotIn rule leaves only the codes it does not match",
			rules: []batchv1.PodFailurePolicyRule{
				harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", notIn, 3, 5),
				harness.OnExitCodes(count, "", in, 3, 4, 5),
				harness.OnExitCodes(count, "", notIn, 5),
			},
			inPlace: []int{1, 2},
			// The last rule's 3 is the InPlace rule before it's: dropped.
			want: map[string][]corev1.ContainerRestartRule{"main": {restart(false, 3, 5)}, "side": {restart(false, 3, 5)}}},
		{name: "a rule whose codes earlier rules all take is dropped; In 0 is nothing",
			rules: []batchv1.PodFailurePolicyRule{
				harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", in, 3),
				harness.OnExitCodes(count, "", in, 3),
				harness.OnExitCodes(count, "", in, 0),
			},
			inPlace: []int{1, 2},
			want:    map[string][]corev1.ContainerRestartRule{"main": nil, "side": nil}},
		{name: "containerName: the rule, and the earlier rules, of that container only",
			rules: []batchv1.PodFailurePolicyRule{
				harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "side", in, 3),
				harness.OnExitCodes(count, "main", in, 3, 4),
				harness.OnExitCodes(count, "", in, 3, 9),
			},
			inPlace: []int{1, 2},
			want: map[string][]corev1.ContainerRestartRule{
				"main": {restart(false, 3, 4), restart(false, 9)},
				"side": {restart(false, 9)},
			}},
		{name: "a NotIn set past 255 codes is written as the codes 1..255 it holds",
			rules: bigNotIn, inPlace: []int{2},
			want: map[string][]corev1.ContainerRestartRule{"main": nil, "side": nil}},
		{name: "19 rules of 255 codes before a NotIn: the codes 1..255",
			rules: append(manyRules, harness.OnExitCodes(count, "", notIn)), inPlace: []int{19},
			want: map[string][]corev1.ContainerRestartRule{"main": {restart(false, upTo(255)...)}, "side": {restart(false, upTo(255)...)}}},
	}
	// In bigNotIn, 1..255 are all taken: nothing is left to restart on.
	// One code free below 256 shows the conversion keeps it.
	bigNotInWithFree := append([]batchv1.PodFailurePolicyRule(nil), bigNotIn...)
	bigNotInWithFree[0] = harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", in, upTo(200, 77)...)
	cases = append(cases, struct {
		name    string
		rules   []batchv1.PodFailurePolicyRule
		inPlace []int
		want    map[string][]corev1.ContainerRestartRule
	}{name: "a NotIn set past 255 codes keeps a free code below 256", rules: bigNotInWithFree, inPlace: []int{2},
		want: map[string][]corev1.ContainerRestartRule{"main": {restart(false, 77)}, "side": {restart(false, 77)}}})

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").PodFailurePolicy(tc.rules...).RetryInPlace(tc.inPlace...).Obj()
			job.Spec.Template.Spec.Containers = []corev1.Container{{Name: "main", Image: "w"}, {Name: "side", Image: "w"}}
			job.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "setup", Image: "w"}}
			pod := First(job, 0)
			got := map[string][]corev1.ContainerRestartRule{}
			for _, c := range pod.Spec.Containers {
				got[c.Name] = c.RestartPolicyRules
				if len(c.RestartPolicyRules) > 20 {
					t.Errorf("container %s has %d rules, more than the API server takes", c.Name, len(c.RestartPolicyRules))
				}
				for _, r := range c.RestartPolicyRules {
					if n := len(r.ExitCodes.Values); n > maxRestartRuleValues {
						t.Errorf("container %s has a rule of %d codes", c.Name, n)
					}
				}
				wantPolicy := (*corev1.ContainerRestartPolicy)(nil)
				if len(tc.inPlace) > 0 {
					wantPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
				}
				if !cmp.Equal(c.RestartPolicy, wantPolicy) {
					t.Errorf("container %s restartPolicy = %v, want %v", c.Name, ptr.Deref(c.RestartPolicy, ""), ptr.Deref(wantPolicy, ""))
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("restart rules (-want +got):\n%s", diff)
			}
			if init := pod.Spec.InitContainers[0]; init.RestartPolicy != nil || init.RestartPolicyRules != nil {
				t.Errorf("init container got %v %v; init containers are left alone", init.RestartPolicy, init.RestartPolicyRules)
			}
		})
	}
}

// Whatever the policy, a container is never restarted on exit code 0, nor
// on a code an earlier rule matches: checked code by code against the
// operator's own matching.
func TestRestartRulesNeverTakeACodeOfAnEarlierRule(t *testing.T) {
	policy := &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{
		{Action: batchv1.PodFailurePolicyActionFailJob, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: notIn, Values: []int32{1, 2, 3, 4}}},
		{Action: batchv1.PodFailurePolicyActionIgnore, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: in, Values: []int32{2}}},
		{Action: count, Retry: ibjv1.RetryInPlace, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: notIn, Values: []int32{4}}},
	}}
	rules := RestartRules(policy, "main")
	for code := int32(0); code <= 300; code++ {
		restarts := false
		for _, r := range rules {
			if contains(r.ExitCodes.Values, code) == (r.ExitCodes.Operator == corev1.ContainerRestartRuleOnExitCodesOpIn) {
				restarts = true
				break
			}
		}
		// The operator's first match: FailJob for 0..∞ but 1..4 (never
		// 0), Ignore 2, then the InPlace rule: 1 and 3.
		want := code == 1 || code == 3
		if restarts != want {
			t.Errorf("exit code %d: restarts in place = %v, want %v (rules %+v)", code, restarts, want, rules)
		}
	}
}
