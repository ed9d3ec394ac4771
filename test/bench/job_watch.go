package main

import (
	"context"
	"maps"
	"slices"
	"sync"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// listWatch lists, then watches from the list's resourceVersion, and lists
// again whenever the watch ends, until ctx is done: every event of every
// object reaches handle. A run watches rather than polls because a list of a
// thousand jobs (or ten thousand pods) every 100 ms would load the API server
// both controllers share.
func listWatch(ctx context.Context, wcl client.WithWatch, newList func() client.ObjectList, ns string,
	handle func(watch.EventType, client.Object)) {
	for ctx.Err() == nil {
		list := newList()
		if err := wcl.List(ctx, list, client.InNamespace(ns)); err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		_ = apimeta.EachListItem(list, func(o runtime.Object) error {
			handle(watch.Added, o.(client.Object))
			return nil
		})
		w, err := wcl.Watch(ctx, newList(), client.InNamespace(ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: list.GetResourceVersion()}})
		if err != nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		for ev := range w.ResultChan() {
			if o, ok := ev.Object.(client.Object); ok && ev.Type != watch.Error {
				handle(ev.Type, o)
			}
		}
		w.Stop()
	}
}

// jobWatch records each job of a run as last seen, and when it was first
// seen terminal.
type jobWatch struct {
	mu         sync.Mutex
	last       map[string]observed
	terminalAt map[string]time.Time
}

func watchJobs(ctx context.Context, wcl client.WithWatch, ctrl, ns string) *jobWatch {
	jw := &jobWatch{last: map[string]observed{}, terminalAt: map[string]time.Time{}}
	newList := func() client.ObjectList { return &batchv1.JobList{} }
	if ctrl == ours {
		newList = func() client.ObjectList { return &ibjv1.IndexedBatchJobList{} }
	}
	go listWatch(ctx, wcl, newList, ns, func(t watch.EventType, o client.Object) {
		if t == watch.Deleted {
			return
		}
		obs := observe(o)
		jw.mu.Lock()
		defer jw.mu.Unlock()
		jw.last[o.GetName()] = obs
		if _, seen := jw.terminalAt[o.GetName()]; obs.terminal && !seen {
			jw.terminalAt[o.GetName()] = time.Now()
		}
	})
	return jw
}

// terminal reports how many jobs have been seen terminal.
func (jw *jobWatch) terminal() int {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	return len(jw.terminalAt)
}

func (jw *jobWatch) snapshot() (map[string]observed, map[string]time.Time) {
	jw.mu.Lock()
	defer jw.mu.Unlock()
	return maps.Clone(jw.last), maps.Clone(jw.terminalAt)
}

// observe reads the part of either controller's status the benchmark checks.
func observe(obj client.Object) observed {
	var o observed
	switch j := obj.(type) {
	case *ibjv1.IndexedBatchJob:
		for _, c := range j.Status.Conditions {
			if (c.Type == "Complete" || c.Type == "Failed") && c.Status == metav1.ConditionTrue {
				o.terminal, o.condType, o.reason = true, c.Type, c.Reason
			}
		}
		o.succeeded, o.failed, o.completed = j.Status.Succeeded, j.Status.Failed, j.Status.CompletedIndexes
		o.failedIdx = ptr.Deref(j.Status.FailedIndexes, "")
	case *batchv1.Job:
		for _, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
				o.terminal, o.condType, o.reason = true, string(c.Type), c.Reason
			}
		}
		o.succeeded, o.failed, o.completed = j.Status.Succeeded, j.Status.Failed, j.Status.CompletedIndexes
		o.failedIdx = ptr.Deref(j.Status.FailedIndexes, "")
	}
	return o
}

// finalizerWatch counts a run's pods that still carry a controller's
// tracking finalizer (ours or upstream's).
type finalizerWatch struct {
	mu      sync.Mutex
	synced  bool
	holding map[string]bool
	// emptiedAt is when the last held pod let go.
	emptiedAt time.Time
}

func watchFinalizers(ctx context.Context, wcl client.WithWatch, ns string) *finalizerWatch {
	fw := &finalizerWatch{holding: map[string]bool{}}
	go listWatch(ctx, wcl, func() client.ObjectList { return &corev1.PodList{} }, ns, func(t watch.EventType, o client.Object) {
		fw.mu.Lock()
		defer fw.mu.Unlock()
		fw.synced = true
		fin := o.GetFinalizers()
		if t != watch.Deleted && (slices.Contains(fin, ibjv1.TrackingFinalizer) || slices.Contains(fin, batchv1.JobTrackingFinalizer)) {
			fw.holding[o.GetName()] = true
		} else if fw.holding[o.GetName()] {
			delete(fw.holding, o.GetName())
			if len(fw.holding) == 0 {
				fw.emptiedAt = time.Now()
			}
		}
	})
	return fw
}

// remaining is the number of pods still holding a tracking finalizer (-1
// before the watch has seen a pod) and when the last one let go.
func (fw *finalizerWatch) remaining() (int, time.Time) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if !fw.synced {
		return -1, time.Time{}
	}
	return len(fw.holding), fw.emptiedAt
}
