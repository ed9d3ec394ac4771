package kueue

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/podset"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestPodSetCountIsThePodsThatRunAtOnce(t *testing.T) {
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want int32
	}{
		{"parallelism", harness.MakeIndexedBatchJob("a", "ns").Completions(10).Parallelism(3).Obj(), 3},
		{"fewer completions than parallelism", harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(5).Obj(), 2},
		{"fewer listed indexes than parallelism", harness.MakeIndexedBatchJob("a", "ns").Completions(10).Parallelism(5).Indexes("1,7").Obj(), 2},
		{"parallelism unset is 1", func() *ibjv1.IndexedBatchJob {
			j := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Obj()
			j.Spec.Parallelism = nil
			return j
		}(), 1},
		{"no completions", harness.MakeIndexedBatchJob("a", "ns").Completions(0).Parallelism(2).Obj(), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.job.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
			got, err := (*Job)(tc.job).PodSets(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			want := []kueuev1beta2.PodSet{{
				Name: kueuev1beta2.DefaultPodSetName, Template: tc.job.Spec.Template, Count: tc.want,
				TopologyRequest: &kueuev1beta2.PodSetTopologyRequest{PodIndexLabel: ptr.To(ibjv1.CompletionIndexLabel)},
			}}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("pod sets (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPodSetCarriesTheTopologyRequest checks that the pod set asks for the
// topology the template's annotations name, as a batch/v1 Job's does, with
// the completion index label as the pod index label, so that Kueue ranks
// the pods by index.
func TestPodSetCarriesTheTopologyRequest(t *testing.T) {
	const (
		rack  = "cloud.example.com/rack"
		block = "cloud.example.com/block"
	)
	indexLabel := ptr.To(ibjv1.CompletionIndexLabel)
	cases := []struct {
		name        string
		annotations map[string]string
		want        *kueuev1beta2.PodSetTopologyRequest
		wantErr     bool
	}{
		{
			name: "no topology annotation: the pod index label alone",
			want: &kueuev1beta2.PodSetTopologyRequest{PodIndexLabel: indexLabel},
		},
		{
			name:        "required",
			annotations: map[string]string{kueuev1beta2.PodSetRequiredTopologyAnnotation: rack},
			want:        &kueuev1beta2.PodSetTopologyRequest{Required: ptr.To(rack), PodIndexLabel: indexLabel},
		},
		{
			name:        "preferred",
			annotations: map[string]string{kueuev1beta2.PodSetPreferredTopologyAnnotation: block},
			want:        &kueuev1beta2.PodSetTopologyRequest{Preferred: ptr.To(block), PodIndexLabel: indexLabel},
		},
		{
			name:        "unconstrained",
			annotations: map[string]string{kueuev1beta2.PodSetUnconstrainedTopologyAnnotation: "true"},
			want:        &kueuev1beta2.PodSetTopologyRequest{Unconstrained: ptr.To(true), PodIndexLabel: indexLabel},
		},
		{
			name: "required, in slices of two within a rack",
			annotations: map[string]string{
				kueuev1beta2.PodSetRequiredTopologyAnnotation:      block,
				kueuev1beta2.PodSetSliceRequiredTopologyAnnotation: rack,
				kueuev1beta2.PodSetSliceSizeAnnotation:             "2",
			},
			want: &kueuev1beta2.PodSetTopologyRequest{
				Required: ptr.To(block), PodSetSliceRequiredTopology: ptr.To(rack), PodSetSliceSize: ptr.To[int32](2),
				PodIndexLabel: indexLabel,
			},
		},
		{
			name:        "an unconstrained value that is no boolean",
			annotations: map[string]string{kueuev1beta2.PodSetUnconstrainedTopologyAnnotation: "yes"},
			wantErr:     true,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).Obj()
			job.Spec.Template.Annotations = tc.annotations
			got, err := (*Job)(job).PodSets(context.Background(), nil)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want an error: %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if diff := cmp.Diff(tc.want, got[0].TopologyRequest); diff != "" {
				t.Errorf("topology request (-want +got):\n%s", diff)
			}
		})
	}
}

func TestReclaimablePodsFollowFinishedIndexes(t *testing.T) {
	job := func(completions, parallelism int32, completed, failed string) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob("a", "ns").Completions(completions).Parallelism(parallelism).Obj()
		j.Status.CompletedIndexes = completed
		if failed != "" {
			j.Status.FailedIndexes = ptr.To(failed)
		}
		return j
	}
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want []kueuev1beta2.ReclaimablePod
	}{
		{"none finished", job(4, 2, "", ""), nil},
		{"more left than parallelism", job(4, 2, "0", ""), nil},
		{"as many left as parallelism", job(4, 2, "0,1", ""), nil},
		{"one left for a parallelism of 2", job(4, 2, "0-2", ""), []kueuev1beta2.ReclaimablePod{{Name: kueuev1beta2.DefaultPodSetName, Count: 1}}},
		{"failed indexes count as finished", job(4, 3, "0", "2,3"), []kueuev1beta2.ReclaimablePod{{Name: kueuev1beta2.DefaultPodSetName, Count: 2}}},
		{"all finished", job(3, 3, "0-2", ""), []kueuev1beta2.ReclaimablePod{{Name: kueuev1beta2.DefaultPodSetName, Count: 3}}},
		{"indexes outside spec.indexes do not count", func() *ibjv1.IndexedBatchJob {
			j := job(10, 2, "0-5,7", "")
			j.Spec.Indexes = ptr.To("7-9")
			return j
		}(), nil},
		{"an unreadable completedIndexes counts as none", job(4, 2, "garbage", ""), nil},
		{"a job that may restart every index gives back nothing", func() *ibjv1.IndexedBatchJob {
			j := job(3, 3, "0-2", "")
			j.Spec.MaxRestarts = ptr.To[int32](1)
			j.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{{
				Action: ibjv1.PodFailurePolicyActionRestartJob, RestartIndexes: ibjv1.RestartAllIndexes,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3}},
			}}}
			return j
		}(), nil},
		{"a job that restarts only unfinished indexes gives back the finished ones", func() *ibjv1.IndexedBatchJob {
			j := job(3, 3, "0-2", "")
			j.Spec.MaxRestarts = ptr.To[int32](1)
			j.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{{
				Action:      ibjv1.PodFailurePolicyActionRestartJob,
				OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{3}},
			}}}
			return j
		}(), []kueuev1beta2.ReclaimablePod{{Name: kueuev1beta2.DefaultPodSetName, Count: 3}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := (*Job)(tc.job).ReclaimablePods(context.Background(), nil)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("reclaimable pods (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRunThenRestore checks that what admission merges into the job (the
// flavor's node selector and tolerations, the admitted parallelism of a job
// that allows partial admission) is taken out again on stop, as the job was.
func TestRunThenRestore(t *testing.T) {
	toleration := corev1.Toleration{Key: "pool", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	for _, partial := range []bool{false, true} {
		t.Run(map[bool]string{false: "full admission", true: "partial admission"}[partial], func(t *testing.T) {
			orig := harness.MakeIndexedBatchJob("a", "ns").Completions(6).Parallelism(4).Suspend(true).NodeSelector("zone", "a").Obj()
			if partial {
				orig.Annotations = map[string]string{MinParallelismAnnotation: "2"}
			}
			job := (*Job)(orig.DeepCopy())
			// What the job asked for, as jobframework reads it back from the Workload.
			asked := []podset.PodSetInfo{{Name: kueuev1beta2.DefaultPodSetName, Count: 4}}
			admitted := []podset.PodSetInfo{{
				Name:         kueuev1beta2.DefaultPodSetName,
				Count:        3,
				NodeSelector: map[string]string{"pool": "spot"},
				Tolerations:  []corev1.Toleration{toleration},
				Labels:       map[string]string{"kueue.x-k8s.io/podset": "main"},
			}}
			if err := job.RunWithPodSetsInfo(context.Background(), nil, admitted); err != nil {
				t.Fatal(err)
			}
			if job.IsSuspended() {
				t.Error("still suspended after RunWithPodSetsInfo")
			}
			wantParallelism := int32(4)
			if partial {
				wantParallelism = 3
			}
			if got := ptr.Deref(job.Spec.Parallelism, 0); got != wantParallelism {
				t.Errorf("parallelism = %d, want %d", got, wantParallelism)
			}
			if diff := cmp.Diff(map[string]string{"zone": "a", "pool": "spot"}, job.Spec.Template.Spec.NodeSelector); diff != "" {
				t.Errorf("node selector (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]corev1.Toleration{toleration}, job.Spec.Template.Spec.Tolerations); diff != "" {
				t.Errorf("tolerations (-want +got):\n%s", diff)
			}

			job.Suspend()
			if !job.RestorePodSetsInfo(context.Background(), []podset.PodSetInfo{{
				Name: kueuev1beta2.DefaultPodSetName, Count: asked[0].Count,
				NodeSelector: orig.Spec.Template.Spec.NodeSelector, Labels: orig.Spec.Template.Labels,
			}}) {
				t.Error("RestorePodSetsInfo reported no change")
			}
			if diff := cmp.Diff(orig.Spec, job.Spec); diff != "" {
				t.Errorf("spec after restore (-was +now):\n%s", diff)
			}
		})
	}
}

func TestFinishedAndSuspended(t *testing.T) {
	done := func(typ string) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob("a", "ns").Obj()
		j.Status.Conditions = []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Message: typ + " message"}}
		return j
	}
	cases := []struct {
		name                      string
		job                       *ibjv1.IndexedBatchJob
		wantMsg                   string
		wantSuccess, wantFinished bool
	}{
		{"running", harness.MakeIndexedBatchJob("a", "ns").Obj(), "", true, false},
		{"complete", done(ibjv1.ConditionComplete), "Complete message", true, true},
		{"failed", done(ibjv1.ConditionFailed), "Failed message", false, true},
		{"only a failure target", done(ibjv1.ConditionFailureTarget), "", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msg, success, finished := (*Job)(tc.job).Finished(context.Background())
			if msg != tc.wantMsg || success != tc.wantSuccess || finished != tc.wantFinished {
				t.Errorf("Finished() = %q, %v, %v; want %q, %v, %v", msg, success, finished, tc.wantMsg, tc.wantSuccess, tc.wantFinished)
			}
		})
	}

	t.Run("a stop in progress is not suspended yet", func(t *testing.T) {
		j := (*Job)(harness.MakeIndexedBatchJob("a", "ns").Suspend(true).Obj())
		if !j.IsSuspended() {
			t.Error("a suspended job is not IsSuspended")
		}
		j.Annotations = map[string]string{stoppingAnnotation: "true"}
		if j.IsSuspended() {
			t.Error("a job Kueue is stopping is IsSuspended")
		}
	})
}

// The integration waits for the Workload API by the name kueueapi holds,
// which must be the one of the Kueue it links.
func TestWaitsForTheWorkloadAPIOfTheLinkedKueue(t *testing.T) {
	if want := kueuev1beta2.SchemeGroupVersion.WithKind("Workload"); kueueapi.WorkloadGVK != want {
		t.Fatalf("kueueapi.WorkloadGVK = %v, Kueue's API is %v", kueueapi.WorkloadGVK, want)
	}
}

func TestActiveAndPodsReady(t *testing.T) {
	job := func(parallelism int32, active, ready int32, completed, failed string) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(parallelism).Obj()
		j.Status.Active, j.Status.Ready = active, ptr.To(ready)
		j.Status.CompletedIndexes = completed
		if failed != "" {
			j.Status.FailedIndexes = ptr.To(failed)
		}
		return j
	}
	multiKueue := func(j *ibjv1.IndexedBatchJob, suspend bool) *ibjv1.IndexedBatchJob {
		j.Spec.ManagedBy = ptr.To(kueuev1beta2.MultiKueueControllerName)
		j.Spec.Suspend = ptr.To(suspend)
		return j
	}
	suspended := func(j *ibjv1.IndexedBatchJob) *ibjv1.IndexedBatchJob {
		j.Spec.Suspend = ptr.To(true)
		return j
	}
	cases := []struct {
		name                  string
		job                   *ibjv1.IndexedBatchJob
		wantActive, wantReady bool
	}{
		{"nothing started", job(2, 0, 0, "", ""), false, false},
		{"all of parallelism ready", job(2, 2, 2, "", ""), true, true},
		{"one ready, one pending", job(2, 2, 1, "", ""), true, false},
		{"one ready, one finished", job(2, 1, 1, "0", ""), true, true},
		{"the last index runs, the rest finished", job(2, 1, 1, "0-2", ""), true, true},
		{"an index failed for good, the other ready", job(2, 1, 1, "", "3"), true, true},
		{"an index failed for good, the other pending", job(2, 1, 0, "", "3"), true, false},
		{"suspended with pods still terminating", suspended(job(2, 2, 0, "", "")), true, false},
		{"dispatched by MultiKueue, running on a worker", multiKueue(job(2, 2, 2, "", ""), false), true, true},
		{"dispatched by MultiKueue, suspended here: its worker's pods are not ours", multiKueue(job(2, 2, 2, "", ""), true), false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j := (*Job)(tc.job)
			if got := j.IsActive(); got != tc.wantActive {
				t.Errorf("IsActive() = %v, want %v", got, tc.wantActive)
			}
			if got := j.PodsReady(context.Background(), nil); got != tc.wantReady {
				t.Errorf("PodsReady() = %v, want %v", got, tc.wantReady)
			}
		})
	}
}
