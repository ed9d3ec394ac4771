package main

import (
	"math"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJobSizesAreTheSameForTheSameSeed(t *testing.T) {
	a, b := jobSizes(500, 200, 1), jobSizes(500, 200, 1)
	if diff := cmp.Diff(a, b); diff != "" {
		t.Errorf("two draws of seed 1 differ (-first +second):\n%s", diff)
	}
	if slices.Equal(a, jobSizes(500, 200, 2)) {
		t.Error("seeds 1 and 2 drew the same fleet")
	}
}

func TestJobSizesOfTheDefaultFleetAreManySmallAndAFewBig(t *testing.T) {
	sizes := jobSizes(500, 200, 1)
	if len(sizes) != 500 {
		t.Fatalf("got %d sizes, want 500", len(sizes))
	}
	if lo, hi := slices.Min(sizes), slices.Max(sizes); lo < 1 || hi > 200 {
		t.Errorf("sizes from %d to %d, want within 1 to 200", lo, hi)
	}
	// The fleet results.md describes: pinned, so that a change of the
	// generator shows here rather than as a different benchmark.
	small, pods := sizeSummary(sizes)
	got := struct{ Small, Pods, Largest int }{small, pods, int(largest(sizes))}
	want := struct{ Small, Pods, Largest int }{287, 13984, 198}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the default fleet (-want +got):\n%s", diff)
	}
	if first := []int32{3, 100, 56, 54, 6, 139}; !slices.Equal(sizes[:len(first)], first) {
		t.Errorf("first sizes %v, want %v", sizes[:len(first)], first)
	}
	big := 0
	for _, s := range sizes {
		if s > 100 {
			big++
		}
	}
	if big == 0 || big > 50 {
		t.Errorf("%d jobs of more than 100 indexes, want a few (1 to 50)", big)
	}
}

func TestJobSizesStayWithinASmallMaximum(t *testing.T) {
	for _, s := range jobSizes(1000, 3, 7) {
		if s < 1 || s > 3 {
			t.Fatalf("size %d outside 1 to 3", s)
		}
	}
}

// jobsCreatedInOrder makes one job a second, finishing at the given times.
func jobsCreatedInOrder(finished ...float64) []jobTimes {
	jobs := make([]jobTimes, len(finished))
	for i, f := range finished {
		jobs[i] = jobTimes{size: 1, created: float64(i), finished: f}
	}
	return jobs
}

func TestFinishOrderComparesCreationAndFinishOrder(t *testing.T) {
	type want struct {
		Tau, InOrder float64
		OK           bool
	}
	for name, tc := range map[string]struct {
		jobs []jobTimes
		want want
	}{
		"first come, first finished":    {jobsCreatedInOrder(10, 11, 12, 13), want{1, 1, true}},
		"last come, first finished":     {jobsCreatedInOrder(13, 12, 11, 10), want{-1, 0, true}},
		"two of three swapped":          {jobsCreatedInOrder(10, 12, 11), want{1.0 / 3, 2.0 / 3, true}},
		"created out of order, in time": {[]jobTimes{{created: 2, finished: 5}, {created: 1, finished: 4}, {created: 3, finished: 6}}, want{1, 1, true}},
		// Two jobs finished together: tau-b leaves the tie out of both
		// the count and the pairs finish order ranks.
		"a tie in finish order": {jobsCreatedInOrder(10, 10, 11), want{2 / math.Sqrt(6), 1, true}},
		"one job":               {jobsCreatedInOrder(10), want{}},
		"no job":                {nil, want{}},
		"all finished together": {jobsCreatedInOrder(10, 10, 10), want{}},
	} {
		t.Run(name, func(t *testing.T) {
			tau, inOrder, ok := finishOrder(tc.jobs)
			if diff := cmp.Diff(tc.want, want{tau, inOrder, ok}, cmp.Comparer(func(a, b float64) bool { return math.Abs(a-b) < 1e-9 })); diff != "" {
				t.Errorf("finishOrder (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSmallLatenciesAreThoseOfJobsOfAtMostTenIndexes(t *testing.T) {
	jobs := []jobTimes{
		{size: 1, created: 0, finished: 2},
		{size: smallJob, created: 1, finished: 4},
		{size: smallJob + 1, created: 1, finished: 50},
		{size: 200, created: 2, finished: 90},
	}
	if diff := cmp.Diff([]float64{2, 3}, smallLatencies(jobs)); diff != "" {
		t.Errorf("smallLatencies (-want +got):\n%s", diff)
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	hundred := make([]float64, 100)
	for i := range hundred {
		hundred[i] = float64(100 - i) // unsorted: 100 down to 1
	}
	for name, tc := range map[string]struct {
		xs      []float64
		p, want float64
	}{
		"p50 of 1 to 100":       {xs: hundred, p: 0.5, want: 50},
		"p99 of 1 to 100":       {xs: hundred, p: 0.99, want: 99},
		"p100 of 1 to 100":      {xs: hundred, p: 1, want: 100},
		"p50 of three":          {xs: []float64{3, 1, 2}, p: 0.5, want: 2},
		"p99 of three":          {xs: []float64{3, 1, 2}, p: 0.99, want: 3},
		"p1 of three":           {xs: []float64{3, 1, 2}, p: 0.01, want: 1},
		"any percentile of one": {xs: []float64{7}, p: 0.99, want: 7},
		"none":                  {xs: nil, p: 0.5, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			before := slices.Clone(tc.xs)
			if got := percentile(tc.xs, tc.p); got != tc.want {
				t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
			if !slices.Equal(before, tc.xs) {
				t.Error("percentile reordered its input")
			}
		})
	}
}

func TestOnlyPicksWorkloadsByNameOrPartOfIt(t *testing.T) {
	for _, tc := range []struct {
		only string
		want []string
	}{
		{"10k", []string{name10k, name10k + " 10% failing"}},
		{"=10k/p500", []string{name10k}},
		{"=" + quickWorkload + "|mixed sizes|2k/p1000", []string{quickWorkload, "mixed sizes 30 jobs x 1-20", "2k/p1000"}},
		{"nothing", nil},
	} {
		var got []string
		for _, name := range []string{quickWorkload, name10k, name10k + " 10% failing", "mixed sizes 30 jobs x 1-20", "2k/p1000", "2k/p500 at QPS 20/burst 30"} {
			if picked(name, tc.only) {
				got = append(got, name)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("-only %q (-want +got):\n%s", tc.only, diff)
		}
	}
}

// The smallest jobs are taken by size, the earlier created first among
// jobs of one size.
func TestSmallestLatencies(t *testing.T) {
	jobs := []jobTimes{
		{size: 5, created: 0, finished: 50},
		{size: 1, created: 2, finished: 4},
		{size: 1, created: 1, finished: 9},
		{size: 200, created: 0, finished: 100},
	}
	got := smallestLatencies(jobs, 3)
	if want := []float64{8, 2, 50}; !slices.Equal(got, want) {
		t.Errorf("smallest 3 = %v, want %v", got, want)
	}
	if got := smallestLatencies(jobs, 100); len(got) != 4 {
		t.Errorf("smallest 100 of 4 jobs = %v, want all 4", got)
	}
}
