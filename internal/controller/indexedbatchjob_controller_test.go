package controller

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
)

// TestReconcileRemovesAFinalizerOnceWhileTheCacheLags runs Reconcile against
// a real API server with a pod cache frozen in the state before the
// finalizer removal, as it is between the patch and its watch event: the
// second sync must not patch the pod again, and must not count it before
// the cache shows the finalizer gone.
func TestReconcileRemovesAFinalizerOnceWhileTheCacheLags(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("needs a kube-apiserver: KUBEBUILDER_ASSETS is not set (make test builds the control plane and sets it)")
	}
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := ibjv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	direct, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var finalizerPatches atomic.Int32
	counting := interceptor.NewClient(direct, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
				finalizerPatches.Add(1)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()

	job := utils.MakeIndexedBatchJob("lag", "default").Completions(1).Parallelism(1).Obj()
	if err := direct.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	pod := makePod(job, 0).api()
	pod.UID, pod.CreationTimestamp = "", metav1.Time{}
	if err := direct.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	pod.Status = makePod(job, 0).succeededAt(time.Now()).api().Status
	if err := direct.Status().Update(ctx, pod); err != nil {
		t.Fatal(err)
	}

	// The cache: never started, filled by hand, so it keeps the pod with
	// its finalizer whatever the API server holds.
	pods, err := newPodSource(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := pods.informers[metav1.NamespaceAll].GetIndexer().Add(newCachedPod(pod)); err != nil {
		t.Fatal(err)
	}
	r := NewReconciler(counting, nil, clock.RealClock{}, DefaultBackoff)
	r.pods = pods
	req := ctrl.Request{NamespacedName: client.ObjectKeyFromObject(job)}

	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	if got := finalizerPatches.Load(); got != 1 {
		t.Fatalf("first sync made %d finalizer patches, want 1", got)
	}
	onServer := &corev1.Pod{}
	if err := direct.Get(ctx, client.ObjectKeyFromObject(pod), onServer); err != nil {
		t.Fatal(err)
	}
	if len(onServer.Finalizers) != 0 {
		t.Fatalf("the pod still has finalizers %v", onServer.Finalizers)
	}

	for i := range 3 {
		if _, err := r.Reconcile(ctx, req); err != nil {
			t.Fatalf("sync %d: %v", i+2, err)
		}
	}
	if got := finalizerPatches.Load(); got != 1 {
		t.Errorf("syncs on a cache that does not show the removal yet patched the pod again: %d patches, want 1", got)
	}
	got := &ibjv1.IndexedBatchJob{}
	if err := direct.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Succeeded != 0 || got.Status.UncountedTerminatedPods == nil || len(got.Status.UncountedTerminatedPods.Succeeded) != 1 {
		t.Errorf("before the cache shows the removal, the pod must stay uncounted: succeeded %d, uncounted %+v",
			got.Status.Succeeded, got.Status.UncountedTerminatedPods)
	}

	// The cache catches up: the pod is counted, once, and the job completes.
	if err := pods.informers[metav1.NamespaceAll].GetIndexer().Update(newCachedPod(onServer)); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatalf("sync after the cache caught up: %v", err)
	}
	if err := direct.Get(ctx, req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Succeeded != 1 || !apimeta.IsStatusConditionTrue(got.Status.Conditions, ibjv1.ConditionComplete) {
		t.Errorf("succeeded %d, conditions %+v; want 1 and Complete", got.Status.Succeeded, got.Status.Conditions)
	}
	if got := finalizerPatches.Load(); got != 1 {
		t.Errorf("%d finalizer patches in all, want 1", got)
	}
}
