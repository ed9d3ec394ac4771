package workloadapi_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
		{name: "spec.scheduling's gang is parallelism pods by default", job: base.Clone().Gang(0).Obj(), want: 4},
		{name: "spec.scheduling's minCount makes it smaller", job: base.Clone().Gang(2).Obj(), want: 2},
		{name: "spec.scheduling's gang shrinks to the indexes left too", job: withStatus(base.Clone().Gang(3).Obj(), "0-6", nil), want: 1},
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

// A job's scheduling compiles to the PodGroupTemplate batch/v1's Job
// controller makes of a Job's: the policy (basic unless a gang), the
// topology constraint, the disruption mode and the shared claims as they
// are, and the pod template's priority class.
func TestTemplateIsWhatTheJobAsks(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns").Completions(8).Parallelism(4)
	basic := workloadapi.SchedulingPolicy{Basic: &workloadapi.BasicSchedulingPolicy{}}
	gang := func(n int32) workloadapi.SchedulingPolicy {
		return workloadapi.SchedulingPolicy{Gang: &workloadapi.GangSchedulingPolicy{MinCount: n}}
	}
	withPriority := base.Clone().BasicScheduling().Obj()
	withPriority.Spec.Template.Spec.PriorityClassName = "high"
	cases := []struct {
		name      string
		job       *ibjv1.IndexedBatchJob
		wantGang  bool
		wantField string
		want      workloadapi.PodGroupTemplate
	}{
		{name: "an empty scheduling block is the basic policy", job: func() *ibjv1.IndexedBatchJob {
			j := base.Clone().Obj()
			j.Spec.Scheduling = &ibjv1.JobSchedulingConfiguration{}
			return j
		}(), wantField: "scheduling", want: workloadapi.PodGroupTemplate{Name: "workers", SchedulingPolicy: basic}},
		{name: "the basic policy, with the template's priority class", job: withPriority, wantField: "scheduling",
			want: workloadapi.PodGroupTemplate{Name: "workers", SchedulingPolicy: basic, PriorityClassName: "high"}},
		{name: "the deprecated gangScheduling is a gang", job: base.Clone().GangScheduling(3).Obj(), wantGang: true, wantField: "gangScheduling",
			want: workloadapi.PodGroupTemplate{Name: "workers", SchedulingPolicy: gang(3)}},
		{name: "every part of spec.scheduling", wantGang: true, wantField: "scheduling",
			job: base.Clone().Gang(3).Topology("topology.kubernetes.io/zone").DisruptTogether(true).
				SharedClaim("gpu", "gpus", false).SharedClaim("nic", "nic-template", true).Obj(),
			want: workloadapi.PodGroupTemplate{
				Name: "workers", SchedulingPolicy: gang(3),
				SchedulingConstraints: &workloadapi.PodGroupSchedulingConstraints{Topology: []workloadapi.TopologyConstraint{{Key: "topology.kubernetes.io/zone"}}},
				DisruptionMode:        &workloadapi.DisruptionMode{All: &workloadapi.AllDisruptionMode{}},
				ResourceClaims: []workloadapi.PodGroupResourceClaim{
					{Name: "gpu", ResourceClaimName: ptr.To("gpus")},
					{Name: "nic", ResourceClaimTemplateName: ptr.To("nic-template")},
				},
			}},
		{name: "disruption mode single", job: base.Clone().BasicScheduling().DisruptTogether(false).Obj(), wantField: "scheduling",
			want: workloadapi.PodGroupTemplate{Name: "workers", SchedulingPolicy: basic, DisruptionMode: &workloadapi.DisruptionMode{Single: &workloadapi.SingleDisruptionMode{}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !workloadapi.Wanted(tc.job) || workloadapi.Field(tc.job) != tc.wantField {
				t.Errorf("Wanted = %v, Field = %q; want true, %q", workloadapi.Wanted(tc.job), workloadapi.Field(tc.job), tc.wantField)
			}
			if _, gang := workloadapi.Gang(tc.job); gang != tc.wantGang {
				t.Errorf("Gang = %v, want %v", gang, tc.wantGang)
			}
			if diff := cmp.Diff(tc.want, workloadapi.Template(tc.job, "workers", 3)); diff != "" {
				t.Errorf("Template (-want +got):\n%s", diff)
			}
			spec := workloadapi.PodGroupSpecOf("a-1", tc.want)
			wantSpec := workloadapi.PodGroupSpec{
				WorkloadRef:      &workloadapi.WorkloadReference{WorkloadName: "a-1", TemplateName: "workers"},
				SchedulingPolicy: tc.want.SchedulingPolicy, SchedulingConstraints: tc.want.SchedulingConstraints,
				ResourceClaims: tc.want.ResourceClaims, DisruptionMode: tc.want.DisruptionMode, PriorityClassName: tc.want.PriorityClassName,
			}
			if diff := cmp.Diff(wantSpec, spec); diff != "" {
				t.Errorf("PodGroupSpecOf (-want +got):\n%s", diff)
			}
		})
	}
	if job := base.Clone().Obj(); workloadapi.Wanted(job) || workloadapi.Field(job) != "" {
		t.Errorf("a job without scheduling or gangScheduling has a Workload")
	}
}

// What an API server drops of a PodGroup (a feature gate off) is named,
// with the gate, and nothing else is.
func TestDroppedNamesWhatTheAPIServerDidNotKeep(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).Gang(0).Topology("zone").DisruptTogether(true).SharedClaim("gpu", "gpus", false).Obj()
	sent, err := workloadapi.Unstructured(&workloadapi.PodGroup{Spec: workloadapi.PodGroupSpecOf("a-1", workloadapi.Template(job, "workers", 4))}, workloadapi.PodGroupGVK)
	if err != nil {
		t.Fatal(err)
	}
	if got := workloadapi.Dropped(sent, sent.DeepCopy()); len(got) != 0 {
		t.Errorf("Dropped of what was kept = %q, want none", got)
	}
	stored := sent.DeepCopy()
	unstructured.RemoveNestedField(stored.Object, "spec", "schedulingConstraints")
	unstructured.RemoveNestedField(stored.Object, "spec", "resourceClaims")
	want := []string{"spec.resourceClaims (feature gate DRAWorkloadResourceClaims)", "spec.schedulingConstraints (feature gate TopologyAwareWorkloadScheduling)"}
	if diff := cmp.Diff(want, workloadapi.Dropped(sent, stored)); diff != "" {
		t.Errorf("Dropped (-want +got):\n%s", diff)
	}
}
