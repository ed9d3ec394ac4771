package controller

import (
	"context"
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
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// laggingCache is a Reconciler against a real API server whose pod cache
// is frozen in the state before a finalizer removal, as it is between the
// patch and its watch event, with one finished pod of a one-index job.
type laggingCache struct {
	r                *Reconciler
	direct           client.WithWatch
	pods             *fixedPods
	pod              *corev1.Pod
	req              ctrl.Request
	finalizerPatches *atomic.Int32
}

func newLaggingCache(t *testing.T, job *ibjv1.IndexedBatchJob, status corev1.PodStatus) *laggingCache {
	t.Helper()
	cfg := harness.StartAPIServer(t, &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
	})

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
	l := &laggingCache{direct: direct, finalizerPatches: &atomic.Int32{}}
	counting := interceptor.NewClient(direct, interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if _, ok := obj.(*metav1.PartialObjectMetadata); ok {
				l.finalizerPatches.Add(1)
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	ctx := context.Background()
	if err := direct.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	l.pod = makePod(job, 0).api()
	l.pod.UID, l.pod.CreationTimestamp = "", metav1.Time{}
	if err := direct.Create(ctx, l.pod); err != nil {
		t.Fatal(err)
	}
	l.pod.Status = status
	if err := direct.Status().Update(ctx, l.pod); err != nil {
		t.Fatal(err)
	}
	// The cache: never started, filled by hand, so it keeps the pod with
	// its finalizer whatever the API server holds.
	l.pods = newFixedPods()
	l.pods.set(l.pod)
	l.r = NewReconciler(counting, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	l.r.pods = l.pods
	l.req = ctrl.Request{NamespacedName: client.ObjectKeyFromObject(job)}
	return l
}

func (l *laggingCache) sync(t *testing.T) {
	t.Helper()
	if _, err := l.r.Reconcile(context.Background(), l.req); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// catchUp shows the cache the pod as the API server holds it.
func (l *laggingCache) catchUp(t *testing.T) {
	t.Helper()
	onServer := &corev1.Pod{}
	if err := l.direct.Get(context.Background(), client.ObjectKeyFromObject(l.pod), onServer); err != nil {
		t.Fatal(err)
	}
	if len(onServer.Finalizers) != 0 {
		t.Fatalf("the pod still has finalizers %v", onServer.Finalizers)
	}
	l.pods.set(onServer)
}

func (l *laggingCache) job(t *testing.T) *ibjv1.IndexedBatchJob {
	t.Helper()
	got := &ibjv1.IndexedBatchJob{}
	if err := l.direct.Get(context.Background(), l.req.NamespacedName, got); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestReconcileRemovesAFinalizerOnceWhileTheCacheLags: a failed pod's
// finalizer goes in the sync that records it; the syncs after, on a cache
// that still shows it, must not patch the pod again, nor count it before
// the cache shows the finalizer gone.
func TestReconcileRemovesAFinalizerOnceWhileTheCacheLags(t *testing.T) {
	job := harness.MakeIndexedBatchJob("lag", "default").Completions(1).Parallelism(1).BackoffLimit(0).Obj()
	l := newLaggingCache(t, job, makePod(job, 0).failedAt(time.Now(), 1).api().Status)

	l.sync(t)
	if got := l.finalizerPatches.Load(); got != 1 {
		t.Fatalf("first sync made %d finalizer patches, want 1", got)
	}
	for range 3 {
		l.sync(t)
	}
	if got := l.finalizerPatches.Load(); got != 1 {
		t.Errorf("syncs on a cache that does not show the removal yet patched the pod again: %d patches, want 1", got)
	}
	if got := l.job(t); got.Status.Failed != 0 || got.Status.UncountedTerminatedPods == nil || len(got.Status.UncountedTerminatedPods.Failed) != 1 {
		t.Errorf("before the cache shows the removal, the pod must stay uncounted: failed %d, uncounted %+v",
			got.Status.Failed, got.Status.UncountedTerminatedPods)
	}

	// The cache catches up: the pod is counted, once, and the job fails.
	l.catchUp(t)
	l.sync(t)
	if got := l.job(t); got.Status.Failed != 1 || !apimeta.IsStatusConditionTrue(got.Status.Conditions, ibjv1.ConditionFailed) {
		t.Errorf("failed %d, conditions %+v; want 1 and Failed", got.Status.Failed, got.Status.Conditions)
	}
	if got := l.finalizerPatches.Load(); got != 1 {
		t.Errorf("%d finalizer patches in all, want 1", got)
	}
}

// TestReconcileReleasesASucceededPodOnceInTheBackground: a succeeded pod is
// counted by its index at once (the job completes in the same sync); its
// finalizer goes through the background queue, once, however often the
// job is synced on a cache that lags.
func TestReconcileReleasesASucceededPodOnceInTheBackground(t *testing.T) {
	job := harness.MakeIndexedBatchJob("lag", "default").Completions(1).Parallelism(1).Obj()
	l := newLaggingCache(t, job, makePod(job, 0).succeededAt(time.Now()).api().Status)
	ctx := context.Background()

	l.sync(t)
	if got := l.finalizerPatches.Load(); got != 0 {
		t.Fatalf("the sync patched %d pods, want none: the removal is the background's", got)
	}
	if got := l.job(t); got.Status.Succeeded != 1 || !apimeta.IsStatusConditionTrue(got.Status.Conditions, ibjv1.ConditionComplete) {
		t.Errorf("succeeded %d, conditions %+v; want 1 and Complete", got.Status.Succeeded, got.Status.Conditions)
	}
	l.r.later.drain(ctx)
	if got := l.finalizerPatches.Load(); got != 1 {
		t.Fatalf("the background made %d finalizer patches, want 1", got)
	}
	// The pod informer may tell the queue of the release before a sync that
	// read the pods earlier runs: the queue forgets the pod, and that sync
	// must not queue it again.
	if n := len(l.r.later.pending); n != 1 {
		t.Fatalf("%d pods pending before the cache showed the release, want 1", n)
	}
	for uid := range l.r.later.pending {
		l.r.later.observed(&jobpod.Pod{Meta: jobpod.Meta{UID: uid}})
	}
	for range 3 {
		l.sync(t)
		l.r.later.drain(ctx)
	}
	if got := l.finalizerPatches.Load(); got != 1 {
		t.Errorf("syncs on a cache that does not show the removal yet had the pod patched again: %d patches, want 1", got)
	}
	if n := len(l.r.later.pending); n != 0 {
		t.Errorf("%d pods pending after the cache showed their release, want 0", n)
	}
	l.catchUp(t)
	l.sync(t)
	l.r.later.drain(ctx)
	if got := l.job(t); got.Status.Succeeded != 1 || l.finalizerPatches.Load() != 1 {
		t.Errorf("succeeded %d after %d patches; want 1 and 1", got.Status.Succeeded, l.finalizerPatches.Load())
	}
}
