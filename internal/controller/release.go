package controller

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

// laterReleaseWorkers is how many finalizer removals of laterReleases are in
// flight at once.
const laterReleaseWorkers = 16

// DefaultReleaseBound is how long a counted pod's finalizer removal waits
// as background work by default (SetReleaseBound): once queued that long,
// it shares the client's tokens with the foreground's writes, a token each
// in turn (throttle.BackgroundUntil), whatever the foreground's use of the
// budget or the API server's business. A counted pod so keeps its
// finalizer at most the bound after it was counted and one turn of the
// client's queue (about writeQueueSeconds) while overdue removals come
// slower than half the QPS, and at most twice the bound when the client
// was at its QPS throughout (they come no faster than pods were counted a
// bound earlier, and go at half the QPS at least), plus the patch's own
// time, unless the patch fails and is retried.
//
// A counted pod that nobody deletes costs nothing while it keeps its
// finalizer (a finished pod holds no quota and no node), and one that is
// deleted is let go by its sync at once (releaseFinalizers): five minutes
// let a job's removals wait until the client has time for them on every
// fleet that the client's QPS can start within them, where a short bound
// would force them ahead of other jobs' creates. docs/bench/apf.md has
// the arithmetic.
const DefaultReleaseBound = 5 * time.Minute

// laterReleases removes, off the critical path, the tracking finalizer of
// pods whose result is counted already (a succeeded pod whose index is in
// the written completedIndexes, any pod of a finished job). Their removals
// are marked as background requests (throttle.BackgroundUntil): they use
// only the client budget that pod creates, deletes, status writes and the
// removals that count failures leave over, and wait while those use it all
// or while the API server is busy, for at most the bound (SetReleaseBound).
//
// Nothing is lost when the queue is: a sync plans the removal again for
// every such pod that still has its finalizer, after a restart too. A
// removal that fails is retried with the queue's rate limit.
type laterReleases struct {
	r *Reconciler
	// bound is how long a removal waits as background work
	// (DefaultReleaseBound).
	bound time.Duration
	queue workqueue.TypedRateLimitingInterface[types.UID]
	mu    sync.Mutex
	// pending are the pods queued, being patched, or let go but not yet
	// shown by the cache without their finalizer (observed forgets them
	// then), so that a sync in the meantime does not queue them again. The
	// queue holds only their UIDs.
	pending map[types.UID]*laterRelease
}

// laterRelease is one pod to let go of, and its job; queued is when, and
// finished when the pod ended (queued where unknown), from which the
// finalizer's hold is measured.
type laterRelease struct {
	job              types.UID
	namespace, name  string
	queued, finished time.Time
	// released: this queue removed the finalizer; seen: the cache shows
	// it gone. The pod is forgotten once both hold (or, seen before it
	// was released, without a patch of its own).
	released, seen bool
}

func newLaterReleases(r *Reconciler) *laterReleases {
	return &laterReleases{
		r:     r,
		bound: DefaultReleaseBound,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[types.UID](),
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "finalizer-releases"}),
		pending: map[types.UID]*laterRelease{},
	}
}

// size is how many pods are pending, for trackedEntries.
func (l *laterReleases) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pending)
}

// add queues the pods of job whose finalizer this process has not removed
// already and that are not pending.
func (l *laterReleases) add(job types.UID, pods []*jobpod.Pod) {
	pods = l.r.jobs.unpatched(job, pods)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pod := range pods {
		if _, ok := l.pending[pod.UID]; ok {
			continue
		}
		now := l.r.clock.Now()
		finished := pod.FinishedAt
		if finished.IsZero() || finished.After(now) {
			finished = now
		}
		l.pending[pod.UID] = &laterRelease{job: job, namespace: pod.Namespace, name: pod.Name, queued: now, finished: finished}
		l.queue.Add(pod.UID)
	}
}

// observed hears of a pod the cache shows without its tracking finalizer,
// or gone. A pod whose release is done is forgotten; one still queued or
// in flight is forgotten when its worker gets to it, so that a sync that
// read its pods before this notice cannot queue it again in between.
func (l *laterReleases) observed(pod *jobpod.Pod) {
	l.mu.Lock()
	defer l.mu.Unlock()
	item := l.pending[pod.UID]
	if item == nil {
		return
	}
	item.seen = true
	if item.released {
		delete(l.pending, pod.UID)
	}
}

// Start runs the workers until ctx ends: the manager runs it as a Runnable
// on every replica, leader or not, since only the leader queues anything.
func (l *laterReleases) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range laterReleaseWorkers {
		wg.Go(func() {
			for l.next(ctx) {
			}
		})
	}
	<-ctx.Done()
	l.queue.ShutDown()
	wg.Wait()
	return nil
}

// NeedLeaderElection: the workers run on every replica; a standby's queue
// stays empty.
func (l *laterReleases) NeedLeaderElection() bool { return false }

// next takes one pod from the queue and removes its finalizer; false once
// the queue is shut down.
func (l *laterReleases) next(ctx context.Context) bool {
	uid, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(uid)
	l.mu.Lock()
	item := l.pending[uid]
	if item != nil && item.seen {
		// Someone else let it go: no patch needed.
		delete(l.pending, uid)
		item = nil
	}
	l.mu.Unlock()
	if item != nil && !item.released {
		l.release(ctx, uid, item)
	}
	return true
}

// drain removes the finalizers of everything queued now, one at a time,
// in the caller's goroutine: for tests that decide when the background runs.
func (l *laterReleases) drain(ctx context.Context) {
	for l.queue.Len() > 0 {
		l.next(ctx)
	}
}

func (l *laterReleases) release(ctx context.Context, uid types.UID, item *laterRelease) {
	pod := &jobpod.Pod{}
	pod.Namespace, pod.Name, pod.UID = item.namespace, item.name, uid
	if err := l.r.removeFinalizer(throttle.BackgroundUntil(ctx, item.queued.Add(l.bound)), pod); err != nil {
		if ctx.Err() == nil {
			log.FromContext(ctx).V(2).Info("Retrying a finalizer removal", "pod", klog.KObj(pod), "error", err)
			l.queue.AddRateLimited(uid)
		}
		return
	}
	l.queue.Forget(uid)
	finalizerHold.Observe(l.r.clock.Since(item.finished).Seconds())
	finalizerReleaseWait.Observe(l.r.clock.Since(item.queued).Seconds())
	// A sync that read its pods before the cache showed this release
	// would queue the pod again once observed has forgotten it; the
	// expectation stops that until a sync reads the pod let go. A job
	// gone meanwhile gets none: nothing would forget it.
	l.r.jobs.releasedInBackground(item.job, pod, l.r.clock.Now())
	l.mu.Lock()
	item.released = true
	if item.seen {
		delete(l.pending, uid)
	}
	l.mu.Unlock()
}
