package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestNewWorkloadAndPodGroup(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f-7a8b").Completions(4).Parallelism(4).GangScheduling(0).Obj()
	objectMeta := metav1.ObjectMeta{
		Name: "train-3f2a9c1d", Namespace: "ns",
		Labels: map[string]string{ibjv1.JobNameLabel: "train", ibjv1.ControllerUIDLabel: "3f2a9c1d-5e6f-7a8b"},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob", Name: "train", UID: "3f2a9c1d-5e6f-7a8b",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}
	gang := workloadapi.SchedulingPolicy{Gang: &workloadapi.GangSchedulingPolicy{MinCount: 4}}
	wantWorkload := &workloadapi.Workload{ObjectMeta: objectMeta, Spec: workloadapi.WorkloadSpec{
		ControllerRef:     &workloadapi.TypedLocalObjectReference{APIGroup: "batch.indexedjob.dev", Kind: "IndexedBatchJob", Name: "train"},
		PodGroupTemplates: []workloadapi.PodGroupTemplate{{Name: "workers", SchedulingPolicy: gang}},
	}}
	wantPodGroup := &workloadapi.PodGroup{ObjectMeta: objectMeta, Spec: workloadapi.PodGroupSpec{
		WorkloadRef:      &workloadapi.WorkloadReference{WorkloadName: "train-3f2a9c1d", TemplateName: "workers"},
		SchedulingPolicy: gang,
	}}
	if diff := cmp.Diff(wantWorkload, newWorkload(job, 4)); diff != "" {
		t.Errorf("Workload (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantPodGroup, newPodGroup(job, 4)); diff != "" {
		t.Errorf("PodGroup (-want +got):\n%s", diff)
	}
}

// A job's spec.scheduling goes into its Workload's one template and the
// PodGroup made from it, every part as the job states it, as batch/v1's
// Job controller writes a Job's.
func TestNewWorkloadAndPodGroupCarryTheJobsScheduling(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f-7a8b").Completions(4).Parallelism(4).
		Gang(3).Topology("topology.kubernetes.io/zone").DisruptTogether(true).
		SharedClaim("gpu", "gpus", false).SharedClaim("nic", "nics", true).Obj()
	job.Spec.Template.Spec.PriorityClassName = "training"
	topology := &workloadapi.PodGroupSchedulingConstraints{Topology: []workloadapi.TopologyConstraint{{Key: "topology.kubernetes.io/zone"}}}
	all := &workloadapi.DisruptionMode{All: &workloadapi.AllDisruptionMode{}}
	claims := []workloadapi.PodGroupResourceClaim{
		{Name: "gpu", ResourceClaimName: ptr.To("gpus")},
		{Name: "nic", ResourceClaimTemplateName: ptr.To("nics")},
	}
	gang := workloadapi.SchedulingPolicy{Gang: &workloadapi.GangSchedulingPolicy{MinCount: 3}}
	wantTemplate := workloadapi.PodGroupTemplate{
		Name: "workers", SchedulingPolicy: gang, SchedulingConstraints: topology, ResourceClaims: claims, DisruptionMode: all, PriorityClassName: "training",
	}
	if diff := cmp.Diff([]workloadapi.PodGroupTemplate{wantTemplate}, newWorkload(job, 3).Spec.PodGroupTemplates); diff != "" {
		t.Errorf("Workload's templates (-want +got):\n%s", diff)
	}
	wantSpec := workloadapi.PodGroupSpec{
		WorkloadRef:      &workloadapi.WorkloadReference{WorkloadName: "train-3f2a9c1d", TemplateName: "workers"},
		SchedulingPolicy: gang, SchedulingConstraints: topology, ResourceClaims: claims, DisruptionMode: all, PriorityClassName: "training",
	}
	if diff := cmp.Diff(wantSpec, newPodGroup(job, 3).Spec); diff != "" {
		t.Errorf("PodGroup's spec (-want +got):\n%s", diff)
	}
	// As sent: the JSON of scheduling.k8s.io/v1beta1.
	pg, err := workloadapi.Unstructured(newPodGroup(job, 3), workloadapi.PodGroupGVK)
	if err != nil {
		t.Fatal(err)
	}
	wantJSON := map[string]any{
		"workloadRef":           map[string]any{"workloadName": "train-3f2a9c1d", "templateName": "workers"},
		"schedulingPolicy":      map[string]any{"gang": map[string]any{"minCount": int64(3)}},
		"schedulingConstraints": map[string]any{"topology": []any{map[string]any{"key": "topology.kubernetes.io/zone"}}},
		"disruptionMode":        map[string]any{"all": map[string]any{}},
		"resourceClaims": []any{
			map[string]any{"name": "gpu", "resourceClaimName": "gpus"},
			map[string]any{"name": "nic", "resourceClaimTemplateName": "nics"},
		},
		"priorityClassName": "training",
	}
	if diff := cmp.Diff(wantJSON, pg.Object["spec"]); diff != "" {
		t.Errorf("PodGroup's spec as sent (-want +got):\n%s", diff)
	}
}

func TestNewPodPointsAtTheJobsPodGroup(t *testing.T) {
	base := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f").Completions(2).Parallelism(2)
	if got := podbuild.First(base.Clone().Obj(), 0).Spec.SchedulingGroup; got != nil {
		t.Errorf("a job without gangScheduling: schedulingGroup = %v, want none", got)
	}
	want := &corev1.PodSchedulingGroup{PodGroupName: ptr.To("train-3f2a9c1d")}
	if diff := cmp.Diff(want, podbuild.First(base.Clone().GangScheduling(0).Obj(), 1).Spec.SchedulingGroup); diff != "" {
		t.Errorf("schedulingGroup (-want +got):\n%s", diff)
	}
	for _, w := range []*harness.JobWrapper{base.Clone().Gang(0), base.Clone().BasicScheduling().Topology("rack")} {
		if diff := cmp.Diff(want, podbuild.First(w.Obj(), 1).Spec.SchedulingGroup); diff != "" {
			t.Errorf("spec.scheduling %+v: schedulingGroup (-want +got):\n%s", w.Obj().Spec.Scheduling, diff)
		}
	}
}

// gangWorld is an API server for ensureGang: its creates answer createErr
// (or store the object), its gets read what was stored, and every request
// is recorded.
type gangWorld struct {
	stored    map[string]*unstructured.Unstructured
	createErr error
	// drop are the spec fields the API server drops from a PodGroup it
	// creates, as one with a feature gate off does.
	drop  []string
	calls []string
}

func (w *gangWorld) client(t *testing.T) client.Client {
	t.Helper()
	return interceptor.NewClient(fake.NewClientBuilder().Build(), interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			u := obj.(*unstructured.Unstructured)
			w.calls = append(w.calls, "create "+u.GetKind())
			if w.createErr != nil {
				return w.createErr
			}
			if _, ok := w.stored[u.GetKind()]; ok {
				return apierrors.NewAlreadyExists(schema.GroupResource{}, u.GetName())
			}
			if u.GetKind() == "PodGroup" {
				for _, f := range w.drop {
					unstructured.RemoveNestedField(u.Object, "spec", f)
				}
			}
			w.stored[u.GetKind()] = u.DeepCopy()
			return nil
		},
		Get: func(_ context.Context, _ client.WithWatch, _ client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
			u := obj.(*unstructured.Unstructured)
			w.calls = append(w.calls, "get "+u.GetKind())
			u.Object = w.stored[u.GetKind()].DeepCopy().Object
			return nil
		},
		Update: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.UpdateOption) error {
			u := obj.(*unstructured.Unstructured)
			w.calls = append(w.calls, "update "+u.GetKind())
			w.stored[u.GetKind()] = u.DeepCopy()
			return nil
		},
	})
}

func TestEnsureGang(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f").Completions(4).Parallelism(4).GangScheduling(0).Obj()
	shrunk := job.DeepCopy() // one index left to run
	shrunk.Status.CompletedIndexes = "0-2"
	finished := job.DeepCopy()
	finished.Status.Conditions = []metav1.Condition{{Type: ibjv1.ConditionComplete, Status: metav1.ConditionTrue}}
	stored := func(minCount int32) map[string]*unstructured.Unstructured {
		wl, _ := workloadapi.Unstructured(newWorkload(job, minCount), workloadapi.WorkloadGVK)
		pg, _ := workloadapi.Unstructured(newPodGroup(job, minCount), workloadapi.PodGroupGVK)
		return map[string]*unstructured.Unstructured{"Workload": wl, "PodGroup": pg}
	}
	basicJob := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f").Completions(4).Parallelism(4).BasicScheduling().Obj()
	storedBasic := func() map[string]*unstructured.Unstructured {
		wl, _ := workloadapi.Unstructured(newWorkload(basicJob, 0), workloadapi.WorkloadGVK)
		pg, _ := workloadapi.Unstructured(newPodGroup(basicJob, 0), workloadapi.PodGroupGVK)
		return map[string]*unstructured.Unstructured{"Workload": wl, "PodGroup": pg}
	}
	everyPart := harness.MakeIndexedBatchJob("train", "ns").UID("3f2a9c1d-5e6f").Completions(4).Parallelism(4).
		Gang(0).Topology("topology.kubernetes.io/zone").DisruptTogether(true).SharedClaim("gpu", "gpus", false).Obj()
	notServed := &meta.NoKindMatchError{GroupKind: workloadapi.WorkloadGVK.GroupKind(), SearchedVersions: []string{"v1beta1"}}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "scheduling.k8s.io", Resource: "workloads"}, "train-3f2a9c1d", errors.New("RBAC"))

	cases := []struct {
		name      string
		job       *ibjv1.IndexedBatchJob
		stored    map[string]*unstructured.Unstructured
		createErr error
		drop      []string
		want      podGroup
		wantErr   bool
		wantCalls []string
		// wantMinCounts are the minCounts stored afterwards, Workload's then PodGroup's.
		wantMinCounts []int64
	}{
		{name: "a job without gangScheduling: nothing asked", job: harness.MakeIndexedBatchJob("a", "ns").Obj()},
		{name: "a finished job: nothing asked", job: finished},
		{
			name: "none yet: both created", job: job,
			want:      podGroup{name: "train-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 4},
			wantCalls: []string{"create Workload", "create PodGroup"}, wantMinCounts: []int64{4, 4},
		},
		{
			name: "both there with the wanted size: read, not written", job: job, stored: stored(4),
			want:      podGroup{name: "train-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 4},
			wantCalls: []string{"create Workload", "get Workload", "create PodGroup", "get PodGroup"}, wantMinCounts: []int64{4, 4},
		},
		{
			name: "fewer indexes left than the gang: both resized", job: shrunk, stored: stored(4),
			want:          podGroup{name: "train-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 1},
			wantCalls:     []string{"create Workload", "get Workload", "update Workload", "create PodGroup", "get PodGroup", "update PodGroup"},
			wantMinCounts: []int64{1, 1},
		},
		{
			name: "spec.scheduling's basic policy: both created, no gang", job: basicJob,
			want:      podGroup{name: "train-3f2a9c1d", field: "scheduling"},
			wantCalls: []string{"create Workload", "create PodGroup"}, wantMinCounts: []int64{0, 0},
		},
		{
			name: "spec.scheduling's basic policy, both there: read, nothing to resize", job: basicJob, stored: storedBasic(),
			want:      podGroup{name: "train-3f2a9c1d", field: "scheduling"},
			wantCalls: []string{"create Workload", "get Workload", "create PodGroup", "get PodGroup"}, wantMinCounts: []int64{0, 0},
		},
		{
			name: "what the API server dropped of the PodGroup is named", job: everyPart, drop: []string{"schedulingConstraints", "resourceClaims"},
			want: podGroup{name: "train-3f2a9c1d", field: "scheduling", gang: true, minCount: 4, dropped: []string{
				"spec.resourceClaims (feature gate DRAWorkloadResourceClaims)", "spec.schedulingConstraints (feature gate TopologyAwareWorkloadScheduling)",
			}},
			wantCalls: []string{"create Workload", "create PodGroup"}, wantMinCounts: []int64{4, 4},
		},
		{
			name: "the cluster does not serve the Workload API: reported, no error", job: job, createErr: notServed,
			want:      podGroup{name: "train-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 4, state: gangNotServed},
			wantCalls: []string{"create Workload"},
		},
		{
			name: "a create the API server refuses: its message, and the error for a retry", job: job, createErr: forbidden,
			want: podGroup{name: "train-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 4, state: gangCreateFailed,
				err: fmt.Sprintf("creating Workload train-3f2a9c1d: %v", forbidden)},
			wantErr: true, wantCalls: []string{"create Workload"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := &gangWorld{stored: tc.stored, createErr: tc.createErr, drop: tc.drop}
			if w.stored == nil {
				w.stored = map[string]*unstructured.Unstructured{}
			}
			r := NewReconciler(w.client(t), nil, testingclock.NewFakeClock(testNow), jobpod.DefaultBackoff)
			got, err := r.ensureGang(context.Background(), tc.job)
			if (err != nil) != tc.wantErr {
				t.Errorf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(podGroup{})); diff != "" {
				t.Errorf("found (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCalls, w.calls); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			var minCounts []int64
			for _, kind := range []string{"Workload", "PodGroup"} {
				if u, ok := w.stored[kind]; ok {
					n, _ := workloadapi.GangMinCount(u)
					minCounts = append(minCounts, n)
				}
			}
			if diff := cmp.Diff(tc.wantMinCounts, minCounts); diff != "" {
				t.Errorf("stored minCounts (-want +got):\n%s", diff)
			}
			if got.name == "" || got.state != gangReady {
				return
			}
			// What was made is not asked about again within the interval,
			// and what was found of it is remembered as it was.
			w.calls = nil
			again, err := r.ensureGang(context.Background(), tc.job)
			if err != nil || len(w.calls) > 0 {
				t.Errorf("second ensureGang: error %v, calls %v; want none", err, w.calls)
			}
			if diff := cmp.Diff(got, again, cmp.AllowUnexported(podGroup{})); diff != "" {
				t.Errorf("second ensureGang found (-first +second):\n%s", diff)
			}
		})
	}
}

// TestSyncJobGangScheduling is the table of syncJob's decisions for a job
// with gangScheduling, by what the reconciler found of its PodGroup.
func TestSyncJobGangScheduling(t *testing.T) {
	now := &metav1.Time{Time: testNow}
	condition := func(typ, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(testNow)}
	}
	base := harness.MakeIndexedBatchJob("a", "ns")
	// Gang scheduling: four pods at once, or none.
	gang := base.Clone().Completions(4).Parallelism(4).GangScheduling(0).UID("3f2a9c1d-0000").Obj()
	gangReadyFor := func(n int32) podGroup {
		return podGroup{name: "a-3f2a9c1d", field: "gangScheduling", gang: true, minCount: n}
	}
	gangFalse := func(reason, message string) metav1.Condition {
		return metav1.Condition{Type: ibjv1.ConditionPodGroupReady, Status: metav1.ConditionFalse, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(testNow)}
	}
	notServedMessage := "The cluster does not serve scheduling.k8s.io/v1beta1 Workloads and PodGroups (Kubernetes 1.37 or later with feature gate GenericWorkload and that API version enabled): " +
		"no pod is created until it does. Recreate the job without gangScheduling to run its pods one by one"
	refusedMessage := "Error creating Workload and PodGroup a-3f2a9c1d, no pod is created until they exist: podgroups is forbidden"
	// spec.scheduling's basic policy, with a topology constraint.
	basic := base.Clone().Completions(4).Parallelism(2).BasicScheduling().Topology("rack").UID("3f2a9c1d-0000").Obj()
	basicMessage := "Workload and PodGroup a-3f2a9c1d: the scheduler places the job's pods one by one (policy basic)"
	droppedMessage := basicMessage + "; the API server dropped the PodGroup's spec.schedulingConstraints (feature gate TopologyAwareWorkloadScheduling), " +
		"so kube-scheduler places the pods without it"
	notServedScheduling := strings.Replace(notServedMessage, "without gangScheduling", "without scheduling", 1)
	runSyncRows(t, []syncRow{
		{
			name: "a gang job whose PodGroup exists starts its whole gang at once and says so",
			job:  gang,
			gang: gangReadyFor(4),
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 4, Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionPodGroupReady, ibjv1.ReasonPodGroupCreated,
						"Workload and PodGroup a-3f2a9c1d: the scheduler binds the job's pods only when it can bind 4 at once")}},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0", "a-2-0 failures=0 ignored=0", "a-3-0 failures=0 ignored=0"},
				Events: []string{"Normal PodGroupCreated: Workload and PodGroup a-3f2a9c1d: the scheduler binds the job's pods only when it can bind 4 at once"},
			},
		},
		{
			name: "a basic-policy job whose PodGroup exists starts its pods by parallelism and says so",
			job:  basic,
			gang: podGroup{name: "a-3f2a9c1d", field: "scheduling"},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionPodGroupReady, ibjv1.ReasonPodGroupCreated, basicMessage)}},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0"},
				Events: []string{"Normal PodGroupCreated: " + basicMessage},
			},
		},
		{
			name: "a job whose PodGroup lost fields to the API server runs and warns of them",
			job:  basic,
			gang: podGroup{name: "a-3f2a9c1d", field: "scheduling", dropped: []string{"spec.schedulingConstraints (feature gate TopologyAwareWorkloadScheduling)"}},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionPodGroupReady, ibjv1.ReasonPodGroupCreated, droppedMessage)}},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0"},
				Events: []string{"Warning PodGroupCreated: " + droppedMessage},
			},
		},
		{
			name: "a scheduling job on a cluster without the Workload API names spec.scheduling",
			job:  basic,
			gang: podGroup{name: "a-3f2a9c1d", field: "scheduling", state: gangNotServed},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseWorkloadAPINotServed,
					Conditions: []metav1.Condition{gangFalse(ibjv1.ReasonWorkloadAPINotServed, notServedScheduling)}},
				Events:       []string{"Warning WorkloadAPINotServed: " + notServedScheduling},
				RequeueAfter: gangRecheckInterval,
			},
		},
		{
			name: "a gang job on a cluster without the Workload API creates no pod, says why and asks again in 30s",
			job:  gang,
			gang: podGroup{name: "a-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 4, state: gangNotServed},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseWorkloadAPINotServed,
					Conditions: []metav1.Condition{gangFalse(ibjv1.ReasonWorkloadAPINotServed, notServedMessage)}},
				Events:       []string{"Warning WorkloadAPINotServed: " + notServedMessage},
				RequeueAfter: gangRecheckInterval,
			},
		},
		{
			name: "a gang job whose PodGroup the API server refused creates no pod and gives the answer",
			job:  gang,
			gang: podGroup{name: "a-3f2a9c1d", field: "gangScheduling", gang: true, minCount: 4, state: gangCreateFailed, err: "podgroups is forbidden"},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhasePodGroupCreateFailed,
					Conditions: []metav1.Condition{gangFalse(ibjv1.ReasonPodGroupCreateFailed, refusedMessage)}},
				Events:       []string{"Warning PodGroupCreateFailed: " + refusedMessage},
				RequeueAfter: gangRecheckInterval,
			},
		},
	})
}
