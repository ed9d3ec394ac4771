package podcache

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Writer creates pods, reading the created pod's metadata (or the whole
// pod) from the answer, and patches them
// on a real API server, and tells its refusals apart as a client would: an
// AlreadyExists, a NotFound, an invalid patch.
func TestPodWritesAgainstTheAPIServer(t *testing.T) {
	cfg := harness.StartAPIServer(t, &envtest.Environment{})
	direct, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	job := harness.MakeIndexedBatchJob("train", "default").Obj()
	job.UID = "job-uid"
	pod := harness.MakePod(job, 0, 0, created).Obj()
	pod.UID, pod.ResourceVersion = "", ""
	answer, err := w.Create(ctx, pod, false)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if answer.UID == "" || answer.Labels[ibjv1.JobNameLabel] != "train" || len(answer.Finalizers) != 1 || len(answer.Spec.Containers) != 0 {
		t.Errorf("the create's answer %+v, want the created pod's metadata only", answer.ObjectMeta)
	}
	whole := harness.MakePod(job, 1, 0, created).Obj()
	whole.UID, whole.ResourceVersion = "", ""
	if answer, err := w.Create(ctx, whole, true); err != nil || answer.UID == "" || len(answer.Spec.Containers) != 1 {
		t.Errorf("create asking for the spec: %v, answer %+v, want the whole pod", err, answer)
	}
	onServer := &corev1.Pod{}
	if err := direct.Get(ctx, client.ObjectKeyFromObject(pod), onServer); err != nil {
		t.Fatalf("the created pod: %v", err)
	}
	if len(onServer.Finalizers) != 1 {
		t.Fatalf("the created pod has finalizers %v, want the tracking finalizer", onServer.Finalizers)
	}
	if _, err := w.Create(ctx, pod, false); !apierrors.IsAlreadyExists(err) {
		t.Errorf("create again: %v, want AlreadyExists", err)
	}
	// A refusal keeps the API server's reason and message, which the
	// controller reports (QuotaExceeded), whatever the Accept asked for.
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "full", Namespace: "default"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
	if err := direct.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	quota.Status.Hard, quota.Status.Used = quota.Spec.Hard, corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}
	if err := direct.Status().Update(ctx, quota); err != nil {
		t.Fatal(err)
	}
	// The quota admission plugin reads quotas from a cache: wait until it
	// refuses a dry run.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		probe := harness.MakePod(job, 3, 0, created).Obj()
		probe.UID, probe.ResourceVersion = "", ""
		if apierrors.IsForbidden(direct.Create(ctx, probe, client.DryRunAll)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the full quota never refused a pod")
		}
	}
	for _, withSpec := range []bool{false, true} {
		refused := harness.MakePod(job, 2, 0, created).Obj()
		refused.UID, refused.ResourceVersion = "", ""
		if _, err := w.Create(ctx, refused, withSpec); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "exceeded quota: full") {
			t.Errorf("create against a full quota (with the spec %v): %v, want Forbidden with the quota's message", withSpec, err)
		}
	}
	if err := direct.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}

	// The patch the controller sends to release a pod whose end it counted.
	removeFinalizerPatch := []byte(`{"metadata":{"$deleteFromPrimitiveList/finalizers":["` + ibjv1.TrackingFinalizer + `"]}}`)
	if err := w.Patch(ctx, pod.Namespace, pod.Name, removeFinalizerPatch); err != nil {
		t.Fatalf("patch: %v", err)
	}
	if err := direct.Get(ctx, client.ObjectKeyFromObject(pod), onServer); err != nil {
		t.Fatal(err)
	}
	if len(onServer.Finalizers) != 0 {
		t.Errorf("after the patch the pod has finalizers %v, want none", onServer.Finalizers)
	}
	if err := w.Patch(ctx, pod.Namespace, "gone", removeFinalizerPatch); !apierrors.IsNotFound(err) {
		t.Errorf("patch of a missing pod: %v, want NotFound", err)
	}
	if err := w.Patch(ctx, pod.Namespace, pod.Name, []byte(`{"metadata":`)); !apierrors.IsBadRequest(err) {
		t.Errorf("malformed patch: %v, want BadRequest", err)
	}
}
