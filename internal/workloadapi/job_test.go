package workloadapi_test

import (
	"testing"

	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestMinCount(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns").Completions(8).Parallelism(4)
	withStatus := func(j *ibjv1.IndexedBatchJob, completed string, failed *string) *ibjv1.IndexedBatchJob {
		j.Status.CompletedIndexes, j.Status.FailedIndexes = completed, failed
		return j
	}
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want int32
	}{
		{name: "the gang is parallelism pods by default", job: base.Clone().GangScheduling(0).Obj(), want: 4},
		{name: "minCount makes it smaller", job: base.Clone().GangScheduling(3).Obj(), want: 3},
		{name: "never more than the indexes left unfinished", job: withStatus(base.Clone().GangScheduling(0).Obj(), "0-5", nil), want: 2},
		{name: "failed indexes are finished too", job: withStatus(base.Clone().GangScheduling(0).BackoffLimitPerIndex(0).Obj(), "0-4", ptr.To("5,6")), want: 1},
		{name: "only the listed indexes count", job: base.Clone().GangScheduling(0).Indexes("1,3,5").Obj(), want: 3},
		{name: "at least 1, even at parallelism 0", job: base.Clone().Parallelism(0).GangScheduling(0).Obj(), want: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := workloadapi.MinCount(tc.job); got != tc.want {
				t.Errorf("MinCount = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestNameIsTheJobsAndItsUIDsStart(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f-7a8b").Obj()
	if got := workloadapi.Name(job); got != "train-3f2a9c1d" {
		t.Errorf("Name = %q, want train-3f2a9c1d", got)
	}
}
