package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

// laterReleaseWorkers is how many finalizer removals of laterReleases are in
// flight at once.
const laterReleaseWorkers = 16

// laterReleases removes, off the critical path, the tracking finalizer of
// pods whose result is counted already (a succeeded pod whose index is in
// the written completedIndexes, any pod of a finished job). Their removals
// are marked as background requests (throttle.Background): they use only
// the client budget that pod creates, deletes, status writes and the
// removals that count failures leave over, and wait while those use it all.
//
// Nothing is lost when the queue is: a sync plans the removal again for
// every such pod that still has its finalizer, after a restart too. A
// removal that fails is retried with the queue's rate limit.
type laterReleases struct {
	r     *Reconciler
	queue workqueue.TypedRateLimitingInterface[laterRelease]
	mu    sync.Mutex
	// queued are the pods in the queue or being patched, so that a sync in
	// the meantime does not queue them again.
	queued map[types.UID]bool
}

// laterRelease is one pod to let go of, and its job.
type laterRelease struct {
	job             types.UID
	namespace, name string
	uid             types.UID
}

func newLaterReleases(r *Reconciler) *laterReleases {
	return &laterReleases{
		r: r,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[laterRelease](),
			workqueue.TypedRateLimitingQueueConfig[laterRelease]{Name: "finalizer-releases"}),
		queued: map[types.UID]bool{},
	}
}

// add queues the pods of job whose finalizer this process has not removed
// already and that are not queued.
func (l *laterReleases) add(job types.UID, pods []*cachedPod) {
	pods = l.r.exp.unpatched(job, pods)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, pod := range pods {
		if l.queued[pod.UID] {
			continue
		}
		l.queued[pod.UID] = true
		l.queue.Add(laterRelease{job: job, namespace: pod.Namespace, name: pod.Name, uid: pod.UID})
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
	item, shutdown := l.queue.Get()
	if shutdown {
		return false
	}
	defer l.queue.Done(item)
	l.release(ctx, item)
	return true
}

// drain removes the finalizers of everything queued now, one at a time,
// in the caller's goroutine: for tests that decide when the background runs.
func (l *laterReleases) drain(ctx context.Context) {
	for l.queue.Len() > 0 {
		l.next(ctx)
	}
}

func (l *laterReleases) release(ctx context.Context, item laterRelease) {
	pod := &cachedPod{}
	pod.Namespace, pod.Name, pod.UID = item.namespace, item.name, item.uid
	if err := l.r.removeFinalizer(throttle.Background(ctx), pod); err != nil {
		if ctx.Err() == nil {
			log.FromContext(ctx).V(2).Info("Retrying a finalizer removal", "pod", klog.KObj(pod), "error", err)
			l.queue.AddRateLimited(item)
		}
		return
	}
	l.queue.Forget(item)
	l.r.exp.removedFinalizers(item.job, []*cachedPod{pod}, l.r.clock.Now())
	l.mu.Lock()
	delete(l.queued, item.uid)
	l.mu.Unlock()
}
