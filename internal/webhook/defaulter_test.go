package webhook

import (
	"context"
	"fmt"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestDefaulter(t *testing.T) {
	failJob := harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want *ibjv1.IndexedBatchJob
	}{
		{
			name: "backoffLimit 6 and TerminatingOrFailed, as batch/v1",
			job:  harness.MakeIndexedBatchJob("a", "ns").Obj(),
			want: harness.MakeIndexedBatchJob("a", "ns").BackoffLimit(6).PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj(),
		},
		{
			name: "unlimited backoffLimit with backoffLimitPerIndex",
			job:  harness.MakeIndexedBatchJob("a", "ns").BackoffLimitPerIndex(1).Obj(),
			want: harness.MakeIndexedBatchJob("a", "ns").BackoffLimitPerIndex(1).BackoffLimit(math.MaxInt32).PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj(),
		},
		{
			name: "Failed with a podFailurePolicy",
			job:  harness.MakeIndexedBatchJob("a", "ns").PodFailurePolicy(failJob).Obj(),
			want: harness.MakeIndexedBatchJob("a", "ns").PodFailurePolicy(failJob).BackoffLimit(6).PodReplacementPolicy(batchv1.Failed).Obj(),
		},
		{
			name: "values set are kept",
			job:  harness.MakeIndexedBatchJob("a", "ns").BackoffLimit(0).PodReplacementPolicy(batchv1.Failed).Obj(),
			want: harness.MakeIndexedBatchJob("a", "ns").BackoffLimit(0).PodReplacementPolicy(batchv1.Failed).Obj(),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := (Defaulter{}).Default(context.Background(), tc.job); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, tc.job); diff != "" {
				t.Errorf("job (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDefaultingPatchesOnlyTheDefaults checks the mutating webhook's answer:
// a patch of the fields Defaulter set, on create, and nothing else, however
// the request's JSON differs from the Go types marshalled back.
func TestDefaultingPatchesOnlyTheDefaults(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := ibjv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	h := defaulting{decoder: admission.NewDecoder(scheme)}
	const base = `{"apiVersion":"batch.indexedjob.dev/v1alpha1","kind":"IndexedBatchJob","metadata":{"name":"a","namespace":"ns"},"spec":{"completions":1,%s"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"main","image":"busybox"}]}}}}`
	cases := []struct {
		name        string
		spec        string
		op          admissionv1.Operation
		wantPatches []jsonpatch.JsonPatchOperation
	}{
		{
			name: "both defaults on create",
			op:   admissionv1.Create,
			wantPatches: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/spec/backoffLimit", int32(6)),
				jsonpatch.NewOperation("add", "/spec/podReplacementPolicy", batchv1.TerminatingOrFailed),
			},
		},
		{
			// batch/v1's onPodConditions[].status has no omitempty: the Go
			// type marshals it as "", which the CRD's enum refuses.
			name: "a podFailurePolicy rule without status gets no status, only the defaults",
			spec: `"podFailurePolicy":{"rules":[{"action":"Ignore","onPodConditions":[{"type":"DisruptionTarget"}]}]},`,
			op:   admissionv1.Create,
			wantPatches: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/spec/backoffLimit", int32(6)),
				jsonpatch.NewOperation("add", "/spec/podReplacementPolicy", batchv1.Failed),
			},
		},
		{
			name: "nothing when both are set",
			spec: `"backoffLimit":0,"podReplacementPolicy":"Failed",`,
			op:   admissionv1.Create,
		},
		{
			name: "nothing on update: podReplacementPolicy is immutable",
			op:   admissionv1.Update,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: tc.op,
				Object:    runtime.RawExtension{Raw: []byte(fmt.Sprintf(base, tc.spec))},
			}})
			if !resp.Allowed {
				t.Fatalf("not allowed: %v", resp.Result)
			}
			if diff := cmp.Diff(tc.wantPatches, resp.Patches); diff != "" {
				t.Errorf("patches (-want +got):\n%s", diff)
			}
		})
	}
}

// TestDefaultingPatchesTheQueueSuspend checks that a queueing system's
// defaulting (Defaulter.Queue, the Kueue integration's in the operator)
// reaches the patch as spec.suspend and the labels it added, and only
// when it changed them.
func TestDefaultingPatchesTheQueueSuspend(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := ibjv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// As the Kueue integration with a LocalQueue default in namespace
	// "queued": a job there without a queue name gets that one.
	suspendQueued := func(_ context.Context, job *ibjv1.IndexedBatchJob) error {
		if job.Namespace == "queued" && job.Labels["kueue.x-k8s.io/queue-name"] == "" {
			if job.Labels == nil {
				job.Labels = map[string]string{}
			}
			job.Labels["kueue.x-k8s.io/queue-name"] = "default"
		}
		if job.Labels["kueue.x-k8s.io/queue-name"] != "" {
			job.Spec.Suspend = ptr.To(true)
		}
		if job.Labels["kueue.x-k8s.io/queue-name"] == "multikueue" && job.Spec.ManagedBy == nil {
			job.Spec.ManagedBy = ptr.To("kueue.x-k8s.io/multikueue")
		}
		return nil
	}
	h := defaulting{decoder: admission.NewDecoder(scheme), defaulter: Defaulter{Queue: suspendQueued}}
	const base = `{"apiVersion":"batch.indexedjob.dev/v1alpha1","kind":"IndexedBatchJob","metadata":{"name":"a","namespace":"%s"%s},"spec":{"completions":1,"backoffLimit":0,"podReplacementPolicy":"Failed",%s"template":{"spec":{"restartPolicy":"Never","containers":[{"name":"main","image":"busybox"}]}}}}`
	cases := []struct {
		name, namespace, meta, spec string
		wantPatches                 []jsonpatch.JsonPatchOperation
	}{
		{
			name:        "a job with a queue name is suspended",
			meta:        `,"labels":{"kueue.x-k8s.io/queue-name":"q"}`,
			wantPatches: []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/spec/suspend", true)},
		},
		{
			name:        "a job with a queue name and suspend false is suspended",
			meta:        `,"labels":{"kueue.x-k8s.io/queue-name":"q"}`,
			spec:        `"suspend":false,`,
			wantPatches: []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/spec/suspend", true)},
		},
		{
			name: "a job created suspended gets no patch",
			meta: `,"labels":{"kueue.x-k8s.io/queue-name":"q"}`,
			spec: `"suspend":true,`,
		},
		{
			name: "a job without a queue name gets no patch",
		},
		{
			name:      "a job without labels given a queue name gets the labels and the suspend",
			namespace: "queued",
			wantPatches: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/spec/suspend", true),
				jsonpatch.NewOperation("add", "/metadata/labels", map[string]string{"kueue.x-k8s.io/queue-name": "default"}),
			},
		},
		{
			name:      "a job with other labels given a queue name gets that label and the suspend",
			namespace: "queued",
			meta:      `,"labels":{"team":"a"}`,
			wantPatches: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/spec/suspend", true),
				jsonpatch.NewOperation("add", "/metadata/labels/kueue.x-k8s.io~1queue-name", "default"),
			},
		},
		{
			name: "a job of a MultiKueue queue is suspended and handed to MultiKueue",
			meta: `,"labels":{"kueue.x-k8s.io/queue-name":"multikueue"}`,
			wantPatches: []jsonpatch.JsonPatchOperation{
				jsonpatch.NewOperation("add", "/spec/suspend", true),
				jsonpatch.NewOperation("add", "/spec/managedBy", "kueue.x-k8s.io/multikueue"),
			},
		},
		{
			name:        "a job of a MultiKueue queue that names its controller keeps it",
			meta:        `,"labels":{"kueue.x-k8s.io/queue-name":"multikueue"}`,
			spec:        `"managedBy":"example.com/other",`,
			wantPatches: []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/spec/suspend", true)},
		},
		{
			name:        "a job with a queue name of its own keeps it",
			namespace:   "queued",
			meta:        `,"labels":{"kueue.x-k8s.io/queue-name":"q"}`,
			wantPatches: []jsonpatch.JsonPatchOperation{jsonpatch.NewOperation("add", "/spec/suspend", true)},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			namespace := tc.namespace
			if namespace == "" {
				namespace = "ns"
			}
			resp := h.Handle(context.Background(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				Operation: admissionv1.Create,
				Object:    runtime.RawExtension{Raw: []byte(fmt.Sprintf(base, namespace, tc.meta, tc.spec))},
			}})
			if !resp.Allowed {
				t.Fatalf("not allowed: %v", resp.Result)
			}
			if diff := cmp.Diff(tc.wantPatches, resp.Patches); diff != "" {
				t.Errorf("patches (-want +got):\n%s", diff)
			}
		})
	}
}
