package controller

import (
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestSuccessPolicyMatching(t *testing.T) {
	both := func(indexes string, count int32) batchv1.SuccessPolicyRule {
		return batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To(indexes), SucceededCount: ptr.To(count)}
	}
	cases := []struct {
		name      string
		policy    *batchv1.SuccessPolicy
		completed indexset.Set
		want      bool
	}{
		{"no policy", nil, indexset.Of(0, 1, 2, 3), false},
		{"no rules", &batchv1.SuccessPolicy{}, indexset.Of(0, 1, 2, 3), false},
		{"indexes only, all done", successPolicyOf(harness.SucceededIndexes("0,2-3")), indexset.Of(0, 2, 3), true},
		{"indexes only, one missing", successPolicyOf(harness.SucceededIndexes("0,2-3")), indexset.Of(0, 1, 2, 4, 5), false},
		{"count only, reached", successPolicyOf(harness.SucceededCount(3)), indexset.Of(1, 5, 7), true},
		{"count only, short", successPolicyOf(harness.SucceededCount(3)), indexset.Of(1, 5), false},
		{"both, enough inside the set", successPolicyOf(both("0-3", 2)), indexset.Of(1, 3), true},
		{"both, completions outside the set do not count", successPolicyOf(both("0-3", 2)), indexset.Of(1, 4, 5, 6), false},
		{"second rule matches", successPolicyOf(harness.SucceededIndexes("7"), harness.SucceededCount(2)), indexset.Of(0, 1), true},
		{"unreadable indexes never match", successPolicyOf(harness.SucceededIndexes("3-1")), indexset.Of(0, 1, 2, 3), false},
		{"indexes beyond completions never match", successPolicyOf(harness.SucceededIndexes("0,9")), indexset.Of(0, 1, 2, 3), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := matchSuccessPolicy(tc.policy, 8, tc.completed); got != tc.want {
				t.Errorf("matchSuccessPolicy = %v, want %v", got, tc.want)
			}
		})
	}
}

func successPolicyOf(rules ...batchv1.SuccessPolicyRule) *batchv1.SuccessPolicy {
	return &batchv1.SuccessPolicy{Rules: rules}
}
