package controller

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

// The background queue patches each pod once, whatever order the syncs,
// the worker and the pod informer's notices come in, and keeps nothing
// about a pod once its release is done and seen.
func TestLaterReleasesPatchOnceAndForget(t *testing.T) {
	var objs []client.Object
	pods := map[string]*jobpod.Pod{}
	for _, name := range []string{"seen-first", "released-first", "in-flight"} {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: k8stypes.UID("uid-" + name),
			Finalizers: []string{ibjv1.TrackingFinalizer}}})
		p := &jobpod.Pod{Tracked: true}
		p.Name, p.Namespace, p.UID = name, "ns", k8stypes.UID("uid-"+name)
		pods[name] = p
	}
	var patches atomic.Int32
	var r *Reconciler
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(objs...).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			patches.Add(1)
			if err := c.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			if obj.GetName() == "in-flight" {
				// The informer's notice arrives before the patch's
				// response, and a sync that read the pods earlier runs.
				r.later.observed(pods["in-flight"])
				r.later.add("job", []*jobpod.Pod{pods["in-flight"]})
			}
			return nil
		},
	})
	r = NewReconciler(c, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	r.jobs.seen(k8stypes.NamespacedName{Namespace: "ns", Name: "job"}, "job") // as a sync of the job does
	l, ctx := r.later, context.Background()

	// Let go by someone else before the worker got to it: no patch.
	l.add("job", []*jobpod.Pod{pods["seen-first"]})
	l.observed(pods["seen-first"])
	l.drain(ctx)
	if got := patches.Load(); got != 0 {
		t.Errorf("%d patches for a pod the cache showed let go before its turn, want 0", got)
	}

	// Released, then a sync that read the pods earlier queues it again,
	// before and after the informer's notice: one patch in all.
	l.add("job", []*jobpod.Pod{pods["released-first"]})
	l.drain(ctx)
	l.add("job", []*jobpod.Pod{pods["released-first"]})
	l.drain(ctx)
	l.observed(pods["released-first"])
	l.add("job", []*jobpod.Pod{pods["released-first"]})
	l.drain(ctx)
	if got := patches.Load(); got != 1 {
		t.Errorf("%d patches in all, want 1", got)
	}

	// The notice comes while the patch is in flight, and a stale sync
	// right after it: still one patch.
	l.add("job", []*jobpod.Pod{pods["in-flight"]})
	l.drain(ctx)
	l.drain(ctx)
	if got := patches.Load(); got != 2 {
		t.Errorf("%d patches in all, want 2 (one for each released pod)", got)
	}
	if n := len(l.pending); n != 0 {
		t.Errorf("%d pods still pending, want 0", n)
	}
}

// A counted pod's finalizer removal is background work for at most the
// bound from when it was queued (DefaultReleaseBound, or what
// SetReleaseBound set): its request carries that deadline.
func TestLaterReleasesAreBackgroundUntilTheBound(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   time.Duration
		bound time.Duration
	}{
		{"default", 0, DefaultReleaseBound},
		{"set", 45 * time.Second, 45 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "ns", UID: "uid-done", Finalizers: []string{ibjv1.TrackingFinalizer}}}
			var deadline time.Time
			var background bool
			c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(pod).Build(), interceptor.Funcs{
				Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
					background, deadline = throttle.IsBackground(ctx), throttle.BackgroundDeadline(ctx)
					return c.Patch(ctx, obj, patch, opts...)
				},
			})
			clk := clocktesting.NewFakeClock(testNow)
			r := NewReconciler(c, nil, clk, jobpod.DefaultBackoff)
			if tc.set > 0 {
				r.SetReleaseBound(tc.set)
			}
			p := &jobpod.Pod{Tracked: true}
			p.Name, p.Namespace, p.UID = pod.Name, pod.Namespace, pod.UID
			r.later.add("job", []*jobpod.Pod{p})
			clk.Step(5 * time.Second)
			r.later.drain(context.Background())
			if !background || !deadline.Equal(testNow.Add(tc.bound)) {
				t.Errorf("the removal went as background %v until %v, want background until %v", background, deadline, testNow.Add(tc.bound))
			}
		})
	}
}

// BenchmarkLaterReleasesQueued is the heap a queued removal costs: a
// job of 100,000 indexes at the client's QPS ends with tens of thousands
// of counted pods still queued (DefaultReleaseBound), on top of the pod
// cache, so this is part of the operator's peak memory there.
func BenchmarkLaterReleasesQueued(b *testing.B) {
	const queued = 35000
	pods := make([]*jobpod.Pod, queued)
	for i := range pods {
		p := &jobpod.Pod{Tracked: true}
		p.Namespace = "bench"
		p.Name = fmt.Sprintf("train-%d-abcde", i)
		p.UID = k8stypes.UID(fmt.Sprintf("0b5c7a3e-1f2d-4c6b-9a8e-%012d", i))
		pods[i] = p
	}
	var perPod float64
	for b.Loop() {
		r := NewReconciler(nil, nil, clock.RealClock{}, jobpod.DefaultBackoff)
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := 0; i < queued; i += 100 {
			r.later.add("job", pods[i:i+100])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPod = float64(after.HeapAlloc-before.HeapAlloc) / queued
		runtime.KeepAlive(r)
	}
	b.ReportMetric(perPod, "heap-B/queued-pod")
}

// A removal the API server refuses is tried again after the rate
// limiter's delay, by the workers, and counted as a retry; the pod is
// patched once it goes through.
func TestLaterReleasesRetryARefusedRemoval(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "done", Namespace: "ns", UID: "uid-done", Finalizers: []string{ibjv1.TrackingFinalizer}}}
	var attempts atomic.Int32
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(pod).Build(), interceptor.Funcs{
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if attempts.Add(1) <= 2 {
				return errors.New("the server refused it")
			}
			return c.Patch(ctx, obj, patch, opts...)
		},
	})
	r := NewReconciler(c, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	retriesBefore := testutil.ToFloat64(finalizerReleaseRetries)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.later.Start(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	p := &jobpod.Pod{Tracked: true}
	p.Name, p.Namespace, p.UID = pod.Name, pod.Namespace, pod.UID
	r.later.add("job", []*jobpod.Pod{p})

	deadline := time.Now().Add(5 * time.Second)
	for {
		got := &corev1.Pod{}
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Finalizers) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d attempts the pod still has finalizers %v", attempts.Load(), got.Finalizers)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := attempts.Load(); got != 3 {
		t.Errorf("%d patches, want 3 (two refused, then the one that went through)", got)
	}
	if got := testutil.ToFloat64(finalizerReleaseRetries) - retriesBefore; got != 2 {
		t.Errorf("%v retries counted, want 2", got)
	}
}
