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
// budget or the API server's business. Overdue removals go oldest first,
// at half the QPS at least (all of it while nothing else waits), so a
// counted pod keeps its finalizer at most the bound after it was counted,
// the time half the QPS takes for the overdue removals queued before it,
// and one turn of the client's queue (about writeQueueSeconds), plus the
// patch's own time, unless the patch fails and is retried. The removals
// before it are as many as the pods counted with or shortly before it:
// none on a fleet whose pods end spread out, a thousand where a job's
// thousand pods end together.
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
// A job of 100,000 indexes at the client's QPS ends with tens of thousands
// of its pods queued here, on top of the pod cache, so a queued pod costs
// little: a record of its name, its job and two times, and its UID in a
// FIFO (BenchmarkLaterReleasesQueued); there is no work queue with a set
// and add times per pod.
//
// Nothing is lost when the queue is: a sync plans the removal again for
// every such pod that still has its finalizer, after a restart too. A
// removal that fails is tried again after a delay from the controller's
// rate limiter (5 ms doubling per failure of the pod, 10 a second in all).
type laterReleases struct {
	r *Reconciler
	// bound is how long a removal waits as background work
	// (DefaultReleaseBound).
	bound time.Duration
	// retries is the delay before a failed removal is tried again.
	retries workqueue.TypedRateLimiter[types.UID]
	mu      sync.Mutex
	// ready wakes a worker when queue gets a pod, and every worker at
	// shutdown (stopped).
	ready   *sync.Cond
	queue   uidFIFO
	stopped bool
	// pending are the pods queued, being patched, waiting for a retry, or
	// let go but not yet shown by the cache without their finalizer
	// (observed forgets them then), so that a sync in the meantime does
	// not queue them again. A pod is in queue at most once.
	pending map[types.UID]*laterRelease
}

// laterRelease is one pod to let go of: its name and job; queued is when
// (Unix nanoseconds), and finished when the pod ended (queued where
// unknown), from which the finalizer's hold is measured.
type laterRelease struct {
	job              *releaseJob
	name             string
	queued, finished int64
	// released: this queue removed the finalizer; seen: the cache shows
	// it gone. The pod is forgotten once both hold (or, seen before it
	// was released, without a patch of its own).
	released, seen bool
}

// releaseJob is the job of the pods one add queued, shared by them.
type releaseJob struct {
	uid       types.UID
	namespace string
}

func newLaterReleases(r *Reconciler) *laterReleases {
	l := &laterReleases{
		r:       r,
		bound:   DefaultReleaseBound,
		retries: workqueue.DefaultTypedControllerRateLimiter[types.UID](),
		pending: map[types.UID]*laterRelease{},
	}
	l.ready = sync.NewCond(&l.mu)
	return l
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
	if len(pods) == 0 {
		return
	}
	now := l.r.clock.Now()
	j := &releaseJob{uid: job, namespace: pods[0].Namespace}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pod := range pods {
		if _, ok := l.pending[pod.UID]; ok {
			continue
		}
		finished := pod.FinishedAt
		if finished.IsZero() || finished.After(now) {
			finished = now
		}
		l.pending[pod.UID] = &laterRelease{job: j, name: pod.Name, queued: now.UnixNano(), finished: finished.UnixNano()}
		l.queue.push(pod.UID)
		l.ready.Signal()
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
			for l.next(ctx, true) {
			}
		})
	}
	<-ctx.Done()
	l.mu.Lock()
	l.stopped = true
	l.ready.Broadcast()
	l.mu.Unlock()
	wg.Wait()
	return nil
}

// NeedLeaderElection: the workers run on every replica; a standby's queue
// stays empty.
func (l *laterReleases) NeedLeaderElection() bool { return false }

// next takes the oldest pod queued and removes its finalizer, waiting for
// one if wait is set; false once the queue is stopped, or empty and wait
// is not set.
func (l *laterReleases) next(ctx context.Context, wait bool) bool {
	l.mu.Lock()
	for l.queue.len() == 0 {
		if l.stopped || !wait {
			l.mu.Unlock()
			return false
		}
		l.ready.Wait()
	}
	uid := l.queue.pop()
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
	for l.next(ctx, false) {
	}
}

// requeue queues again a pod whose removal failed, unless the queue is
// stopped or the pod was forgotten meanwhile.
func (l *laterReleases) requeue(uid types.UID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped || l.pending[uid] == nil {
		return
	}
	l.queue.push(uid)
	l.ready.Signal()
}

func (l *laterReleases) release(ctx context.Context, uid types.UID, item *laterRelease) {
	pod := &jobpod.Pod{}
	pod.Namespace, pod.Name, pod.UID = item.job.namespace, item.name, uid
	queued := time.Unix(0, item.queued)
	if err := l.r.removeFinalizer(throttle.BackgroundUntil(ctx, queued.Add(l.bound)), pod); err != nil {
		if ctx.Err() == nil {
			log.FromContext(ctx).V(2).Info("Retrying a finalizer removal", "pod", klog.KObj(pod), "error", err)
			finalizerReleaseRetries.Inc()
			time.AfterFunc(l.retries.When(uid), func() { l.requeue(uid) })
		}
		return
	}
	l.retries.Forget(uid)
	finalizerHold.Observe(l.r.clock.Since(time.Unix(0, item.finished)).Seconds())
	finalizerReleaseWait.Observe(l.r.clock.Since(queued).Seconds())
	// A sync that read its pods before the cache showed this release
	// would queue the pod again once observed has forgotten it; the
	// expectation stops that until a sync reads the pod let go. A job
	// gone meanwhile gets none: nothing would forget it.
	l.r.jobs.releasedInBackground(item.job.uid, pod, l.r.clock.Now())
	l.mu.Lock()
	item.released = true
	if item.seen {
		delete(l.pending, uid)
	}
	l.mu.Unlock()
}

// uidFIFO is a queue of pod UIDs, oldest first, that gives its memory
// back as it empties.
type uidFIFO struct {
	uids []types.UID
	head int
}

func (q *uidFIFO) len() int { return len(q.uids) - q.head }

func (q *uidFIFO) push(uid types.UID) { q.uids = append(q.uids, uid) }

// pop takes the oldest UID; the FIFO must not be empty.
func (q *uidFIFO) pop() types.UID {
	uid := q.uids[q.head]
	q.uids[q.head] = ""
	q.head++
	switch {
	case q.head == len(q.uids):
		// Empty: start again at the front, and let a large array go.
		q.uids, q.head = q.uids[:0], 0
		if cap(q.uids) > fifoKeep {
			q.uids = nil
		}
	case q.head >= fifoKeep && q.head > len(q.uids)/2:
		// More than half taken: move the rest to the front, so that a
		// queue that never empties does not grow without end.
		n := copy(q.uids, q.uids[q.head:])
		clear(q.uids[n:])
		q.uids, q.head = q.uids[:n], 0
	}
	return uid
}

// fifoKeep is how many UIDs' room a uidFIFO keeps when it empties, and
// how many it takes before it moves the rest to the front.
const fifoKeep = 1024
