package controller

import (
	batchv1 "k8s.io/api/batch/v1"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// matchSuccessPolicy reports whether one of the rules is met by the
// completed indexes, as upstream's matchSuccessPolicy: succeededIndexes alone
// needs all of those indexes; succeededCount alone needs that many completed
// indexes; both need that many among those indexes.
func matchSuccessPolicy(policy *batchv1.SuccessPolicy, completions int32, completed indexset.Set) bool {
	if policy == nil {
		return false
	}
	for _, rule := range policy.Rules {
		switch {
		case rule.SucceededIndexes != nil:
			want, err := indexset.Parse(*rule.SucceededIndexes, completions)
			if err != nil || want.Len() == 0 {
				continue // admission rejects this; a rule we cannot read never matches
			}
			if rule.SucceededCount != nil {
				if completed.CountIn(want) >= int(*rule.SucceededCount) {
					return true
				}
			} else if completed.Contains(want) {
				return true
			}
		case rule.SucceededCount != nil:
			if completed.Len() >= int(*rule.SucceededCount) {
				return true
			}
		}
	}
	return false
}
