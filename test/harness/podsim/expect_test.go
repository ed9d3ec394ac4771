package podsim

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIntervals(t *testing.T) {
	for _, tc := range []struct {
		set  []int
		n    int
		want string
	}{
		{nil, 4, ""},
		{[]int{0}, 4, "0"},
		{[]int{1, 2}, 4, "1,2"},
		{[]int{0, 3, 4, 5, 6, 7}, 8, "0,3-7"},
		{[]int{0, 1, 2, 5, 7, 8}, 9, "0-2,5,7,8"},
	} {
		set := make([]bool, tc.n)
		for _, i := range tc.set {
			set[i] = true
		}
		if got := Intervals(set); got != tc.want {
			t.Errorf("Intervals(%v) = %q, want %q", tc.set, got, tc.want)
		}
	}
}

func TestExpect(t *testing.T) {
	ok := func(i int) Record { return Record{Index: i, Phase: corev1.PodSucceeded} }
	ko := func(i int) Record { return Record{Index: i, Phase: corev1.PodFailed} }

	// The seed's example: indexes 1 and 2 always fail, limit 1.
	got := Expect([]Record{ok(0), ko(1), ko(1), ko(2), ko(2), ok(3), ok(4), ok(5), ok(6), ok(7)}, 8, 1)
	want := Outcome{Succeeded: 6, Failed: 4, CompletedIndexes: "0,3-7", FailedIndexes: "1,2", Condition: "Failed", Completed: 6, FailedCount: 2, MaxRuns: 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("seed example: got %+v, want %+v", got, want)
	}

	// A failure within the limit followed by a success completes the index.
	got = Expect([]Record{ko(0), ok(0), ok(1)}, 2, 1)
	want = Outcome{Succeeded: 2, Failed: 1, CompletedIndexes: "0,1", Condition: "Complete", Completed: 2, MaxRuns: 2}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("retried index: got %+v, want %+v", got, want)
	}

	// An index with retries left and no success is unfinished.
	got = Expect([]Record{ko(0), ok(1)}, 3, 1)
	if !reflect.DeepEqual(got.Unfinished, []int{0, 2}) {
		t.Errorf("unfinished: got %v, want [0 2]", got.Unfinished)
	}
}
