package indexset

import (
	"testing"

	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

func TestOfJobIsTheListedIndexesOrAllBelowCompletions(t *testing.T) {
	for _, tc := range []struct {
		name        string
		completions int32
		indexes     *string
		want        string
		wantErr     bool
	}{
		{"every index below completions", 5, nil, "0-4", false},
		{"no completions, no index", 0, nil, "", false},
		{"the listed ones", 10, ptr.To("9,1,3-5"), "1,3-5,9", false},
		{"a list past completions is unreadable: none", 4, ptr.To("1,7"), "", true},
		{"a malformed list: none", 10, ptr.To("1,,3"), "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := &ibjv1.IndexedBatchJob{}
			job.Spec.Completions, job.Spec.Indexes = tc.completions, tc.indexes
			got, err := OfJob(job)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want one: %v", err, tc.wantErr)
			}
			if got.String() != tc.want {
				t.Errorf("indexes %q, want %q", got.String(), tc.want)
			}
		})
	}
}
