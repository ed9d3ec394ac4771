package podsim

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Outcome is the status an indexed job with per-index backoff must reach,
// derived from the pods that really ran, independently of the controller's
// own code.
type Outcome struct {
	Succeeded, Failed int32
	// CompletedIndexes and FailedIndexes are interval strings ("0,3-7").
	CompletedIndexes, FailedIndexes string
	// Condition is Complete when every index succeeded, else Failed.
	Condition string
	// Unfinished lists indexes that neither succeeded nor used up their
	// retries: a job reported terminal with any of them is wrong.
	Unfinished []int
	// Completed and FailedCount are the sizes of the two index sets.
	Completed, FailedCount int
	// MaxRuns is the most pods any one index ran.
	MaxRuns int
}

// Expect derives the final status of a job with the given completions and
// backoffLimitPerIndex (and no maxFailedIndexes, pod failure policy or
// success policy) from the ground truth: succeeded and failed count the
// pods, an index is completed once a pod of it succeeded and failed once
// more than backoffLimitPerIndex of its pods failed.
func Expect(truth []Record, completions, backoffLimitPerIndex int) Outcome {
	var out Outcome
	succeeded := make([]bool, completions)
	failures := make([]int, completions)
	runs := make([]int, completions)
	for _, r := range truth {
		if r.Index < 0 || r.Index >= completions {
			continue
		}
		runs[r.Index]++
		out.MaxRuns = max(out.MaxRuns, runs[r.Index])
		switch r.Phase {
		case corev1.PodSucceeded:
			out.Succeeded++
			succeeded[r.Index] = true
		case corev1.PodFailed:
			out.Failed++
			failures[r.Index]++
		}
	}
	failed := make([]bool, completions)
	anyFailed := false
	for i := range completions {
		switch {
		case succeeded[i]:
			out.Completed++
		case failures[i] > backoffLimitPerIndex:
			failed[i], anyFailed = true, true
			out.FailedCount++
		default:
			out.Unfinished = append(out.Unfinished, i)
		}
	}
	out.CompletedIndexes = Intervals(succeeded)
	out.FailedIndexes = Intervals(failed)
	out.Condition = "Complete"
	if anyFailed {
		out.Condition = "Failed"
	}
	return out
}

// Intervals formats the set indexes as the API does: ascending, runs of
// three or more as "a-b", comma separated ("0,3-7").
func Intervals(set []bool) string {
	var parts []string
	for i := 0; i < len(set); i++ {
		if !set[i] {
			continue
		}
		j := i
		for j+1 < len(set) && set[j+1] {
			j++
		}
		switch j {
		case i:
			parts = append(parts, strconv.Itoa(i))
		case i + 1:
			parts = append(parts, strconv.Itoa(i), strconv.Itoa(j))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", i, j))
		}
		i = j
	}
	return strings.Join(parts, ",")
}
