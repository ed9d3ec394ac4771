package podcache

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Writer, which reads no answer of a success, creates and patches pods
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
	if err := w.Create(ctx, pod); err != nil {
		t.Fatalf("create: %v", err)
	}
	onServer := &corev1.Pod{}
	if err := direct.Get(ctx, client.ObjectKeyFromObject(pod), onServer); err != nil {
		t.Fatalf("the created pod: %v", err)
	}
	if len(onServer.Finalizers) != 1 {
		t.Fatalf("the created pod has finalizers %v, want the tracking finalizer", onServer.Finalizers)
	}
	if err := w.Create(ctx, pod); !apierrors.IsAlreadyExists(err) {
		t.Errorf("create again: %v, want AlreadyExists", err)
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
