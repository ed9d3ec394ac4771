package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// spec.gangScheduling is deprecated: admission says so, and what to write
// instead; spec.scheduling draws no warning.
func TestGangSchedulingIsDeprecated(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4)
	cases := []struct {
		name string
		job  *harness.JobWrapper
		want []string
	}{
		{name: "no gang", job: base.Clone()},
		{name: "scheduling's gang", job: base.Clone().Gang(3)},
		{name: "gangScheduling with minCount", job: base.Clone().GangScheduling(3), want: []string{
			"spec.gangScheduling is deprecated: it maps to spec.scheduling.schedulingPolicy.gang.minCount, batch/v1 Job's field; " +
				"write scheduling: {schedulingPolicy: {gang: {minCount: 3}}} in its place (where minCount may also change while the job runs)",
		}},
		{name: "gangScheduling of parallelism pods", job: base.Clone().GangScheduling(0), want: []string{
			"spec.gangScheduling is deprecated: it maps to spec.scheduling.schedulingPolicy.gang.minCount, batch/v1 Job's field; " +
				"write scheduling: {schedulingPolicy: {gang: {}}} in its place (where minCount may also change while the job runs)",
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, schedulingWarnings(tc.job.Obj())); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}
