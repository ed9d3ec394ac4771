// Package podcache is the operator's view of its pods: informers that keep
// a compact record of each (jobpod.Pod), read from the API server's
// protobuf in place and without the parts no sync reads, indexed by job;
// and the writes a pod costs (its create and its finalizer patch), sent
// without decoding the answer. The controller decides; this package only
// reads and writes pods for it.
package podcache

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// compactPod is the pod informer's transform. Anything that is not a Pod
// (an object already compacted, on a resync) passes unchanged.
func compactPod(obj any) (any, error) {
	switch pod := obj.(type) {
	case *wirePod:
		return jobpod.Read(&pod.Pod), nil
	case *corev1.Pod:
		return jobpod.Read(pod), nil
	}
	return obj, nil
}

// Source watches the operator's pods (those with the controller-uid
// label) with informers of its own: one for all namespaces, or one per
// namespace under --namespaces. It keeps jobpod.Pods, listed by job, and
// queues the job named in a pod's job-name label on every event, so that
// pods left by a deleted job still reach a sync that releases them. The
// informers start with the controller, so a standby replica caches no pods.
type Source struct {
	informers map[string]toolscache.SharedIndexInformer // by namespace; "" is all
	// handled tell when the event handler has taken in every pod of its
	// informer's first list.
	handled []toolscache.InformerSynced
	// jobs are the pods by job, as the event handler has seen them.
	jobs jobPods
	// finalizerGone, if not nil, hears of every pod the cache shows losing its
	// tracking finalizer or gone.
	finalizerGone func(*jobpod.Pod)
	// strayed, if not nil, hears of every pod the cache sees stray
	// (jobpod.Pod.Strayed).
	strayed func(*jobpod.Pod)
	// batchPeriod is how long a pod event waits to be synced (Options).
	batchPeriod time.Duration
	// cached counts the pods the informers hold, kept by the event handler
	// (every pod the cache takes in is an add, every one it drops a
	// delete), so that a metrics scrape does not list every key.
	cached atomic.Int64
	// failing counts, by job, the cached failed pods that still carry the
	// tracking finalizer: failures no sync has counted yet.
	failing failingPods
}

// Options are a Source's settings.
type Options struct {
	// FinalizerGone, if not nil, hears of every pod the cache shows losing
	// its tracking finalizer or gone.
	FinalizerGone func(*jobpod.Pod)
	// Strayed, if not nil, hears of every pod that carries the operator's
	// finalizers but no longer belongs to a job (jobpod.Pod.Strayed),
	// including one that left the watch because its controller-uid label
	// was removed or one whose deletion the informer missed while it still
	// held a finalizer.
	Strayed func(*jobpod.Pod)
	// BatchPeriod is how long the sync waits that a pod's creation,
	// deletion or failure asks for, so that the events that land together
	// (two failures, a node's pods) are decided in one sync, as upstream's
	// pod update batch period (1 s). Later events of the same job within it
	// join the same sync; zero syncs at once. Other updates (a pod that
	// succeeded, started or became ready) sync at once, as upstream's do.
	BatchPeriod time.Duration
	// Now is the clock of FailureSeen, time.Now when nil.
	Now func() time.Time
}

// New makes the Source of the pods in namespaces (all when empty) on cfg,
// whose rate limiter it shares.
func New(cfg *rest.Config, namespaces []string, opts Options) (*Source, error) {
	// Pods are read in protobuf as wirePods (wire_pod.go): without the spec
	// and the managed fields, which no sync reads, and from a watch event's
	// bytes in place (watch_decode.go).
	pods, err := coreV1ProtobufClient(cfg, wireSerializer)
	if err != nil {
		return nil, err
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	s := &Source{informers: map[string]toolscache.SharedIndexInformer{}, finalizerGone: opts.FinalizerGone, strayed: opts.Strayed, batchPeriod: opts.BatchPeriod}
	s.failing.now = opts.Now
	for _, ns := range namespaces {
		lw := toolscache.NewFilteredListWatchFromClient(pods, "pods", ns, func(o *metav1.ListOptions) {
			o.LabelSelector = ibjv1.ControllerUIDLabel
		})
		inf := toolscache.NewSharedIndexInformerWithOptions(lw, &wirePod{}, toolscache.SharedIndexInformerOptions{
			ObjectDescription: "pods of IndexedBatchJobs",
		})
		if err := inf.SetTransform(compactPod); err != nil {
			return nil, err
		}
		s.informers[ns] = inf
	}
	return s, nil
}

// Start registers the event handler and runs the informers until ctx ends.
func (s *Source) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	handler := s.handler(queue.Add, podEventAdder(queue, s.batchPeriod))
	for _, inf := range s.informers {
		reg, err := inf.AddEventHandler(handler)
		if err != nil {
			return err
		}
		s.handled = append(s.handled, reg.HasSynced)
		go inf.RunWithContext(ctx)
	}
	return nil
}

// handler queues the job named by a pod's job-name label on the pod's
// events, except a succeeded pod's release (releasedAfterSuccess), and
// tells finalizerGone of each pod the cache shows let go or gone.
func (s *Source) handler(now, batched func(reconcile.Request)) toolscache.ResourceEventHandlerFuncs {
	enqueue := func(add func(reconcile.Request), pod *jobpod.Pod) {
		if pod.JobName != "" {
			add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.JobName}})
		}
	}
	letGo := func(pod *jobpod.Pod) {
		if s.finalizerGone != nil {
			s.finalizerGone(pod)
		}
	}
	stray := func(pod *jobpod.Pod, gone bool) {
		if s.strayed != nil && (pod.Strayed() || gone && pod.Finalized()) {
			s.strayed(pod)
		}
	}
	// An update that would sync at once waits for the batch too while the
	// job has a failure no sync counted yet: its sync is the failure's,
	// which sees every failure of the batch together.
	soon := func(pod *jobpod.Pod) {
		if s.failing.has(pod) {
			enqueue(batched, pod)
		} else {
			enqueue(now, pod)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*jobpod.Pod); ok {
				s.cached.Add(1)
				s.jobs.update(nil, pod)
				s.failing.update(nil, pod)
				stray(pod, false)
				enqueue(batched, pod)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, ok1 := oldObj.(*jobpod.Pod)
			pod, ok2 := obj.(*jobpod.Pod)
			if !ok1 || !ok2 {
				return
			}
			s.jobs.update(old, pod)
			if old.Tracked && !pod.Tracked {
				letGo(pod)
			}
			s.failing.update(old, pod)
			stray(pod, false)
			if old.JobName != pod.JobName {
				// Its job-name label changed: the job it left syncs too.
				enqueue(now, old)
			}
			switch {
			case releasedAfterSuccess(old, pod):
			case newlyFailed(old, pod):
				enqueue(batched, pod)
			default:
				soon(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*jobpod.Pod); ok {
				s.cached.Add(-1)
				s.jobs.update(pod, nil)
				s.failing.update(pod, nil)
				// A pod deleted for good has no finalizer left: one that
				// still holds one left the watch (its controller-uid label
				// removed: the API server sends it as it was before that
				// edit), or its deletion was missed.
				stray(pod, true)
				letGo(pod)
				enqueue(batched, pod)
			}
		},
	}
}

// newlyFailed reports whether the update is the pod's failure, or its
// deletion (a failure under podReplacementPolicy TerminatingOrFailed, and
// what a lost node's pods get together). As upstream's Job controller, a
// failure waits for the batch period, so that failures
// that land together are decided together (the one that ends the job is
// seen before a replacement of the other starts); every other update (a
// pod that succeeded, started or became ready) is synced at once.
func newlyFailed(old, pod *jobpod.Pod) bool {
	return pod.Phase == corev1.PodFailed && old.Phase != corev1.PodFailed ||
		pod.Terminating() && old.DeletionTimestamp == nil
}

// releasedAfterSuccess reports whether a pod update only took the tracking
// finalizer off a pod that had succeeded already. Such a pod is counted by
// its index, which the written status holds before its finalizer goes, so
// its release changes nothing a sync decides: it queues no sync, and the
// thousands of releases that end a large job do not each cost one. A pod
// with container restarts may have failed in place: the status records it
// by its UID too, which the sync after its release drops, so it syncs.
func releasedAfterSuccess(old, pod *jobpod.Pod) bool {
	return old.Phase == corev1.PodSucceeded && pod.Phase == corev1.PodSucceeded && pod.InPlace == 0 &&
		old.Tracked && !pod.Tracked && (old.DeletionTimestamp == nil) == (pod.DeletionTimestamp == nil)
}

// podEventAdder queues a sync batch after a pod event (a pod created,
// deleted or newly failed). A job already waiting keeps its earlier time,
// so a stream of events is synced once per batch, not postponed by each.
// Where the sync goes among the jobs that wait is the queue's to decide
// (the controller ranks every add by the job's place).
func podEventAdder(queue workqueue.TypedRateLimitingInterface[reconcile.Request], batch time.Duration) func(reconcile.Request) {
	return func(req reconcile.Request) { queue.AddAfter(req, batch) }
}

// WaitForSync returns once every informer has listed its pods and the
// event handler has taken them in: a sync lists its job's pods from what
// the handler has seen, so none may start before it has seen them all.
func (s *Source) WaitForSync(ctx context.Context) error {
	if !toolscache.WaitForCacheSync(ctx.Done(), s.handled...) {
		return errors.New("timed out waiting for the pod informers to sync")
	}
	return nil
}

// FailingJobs is how many jobs have a cached failed pod no sync has
// counted yet (the entries of the store behind the batching of failures).
func (s *Source) FailingJobs() int { return s.failing.len() }

// FailureSeen is when the cache saw the latest failed (or terminating)
// pod of the job whose failure no sync has counted yet; zero without one.
// A failure's batch is held from then: a sync that comes late does not see
// the failure's finishedAt as long past and start a pod before the next
// failure of the batch reaches the cache.
func (s *Source) FailureSeen(namespace, job string) time.Time {
	return s.failing.seen(namespace, job)
}

// Len is how many pods the informers cache.
func (s *Source) Len() int { return int(s.cached.Load()) }

func (s *Source) String() string { return "pods of IndexedBatchJobs" }

// Get returns the job's cached pod of that name, nil if it has none. It is
// the cache's own object: read it, never write to it.
func (s *Source) Get(namespace, job, name string) *jobpod.Pod {
	return s.jobs.get(namespace, job, name)
}

// List returns the cached pods labelled with the job's name, in no order,
// in a slice of the caller's. They are the cache's own objects: read them,
// never write to them.
func (s *Source) List(namespace, name string) ([]*jobpod.Pod, error) {
	return s.jobs.list(namespace, name), nil
}

// ListUnsettled returns the cached pods labelled with the job's name but
// those settled for the job of UID owner (Settle), in no order, in a slice
// of the caller's; with the indexes of the settled pods (a superset) and
// the latest end among them.
func (s *Source) ListUnsettled(namespace, name string, owner types.UID) ([]*jobpod.Pod, indexset.Set, time.Time) {
	return s.jobs.listUnsettled(namespace, name, owner)
}

// Settle keeps the given pods of the job out of ListUnsettled for the job
// of UID owner until they change (a pod that changed since it was listed
// is not settled), or Unsettle. List and Get still show them.
func (s *Source) Settle(namespace, name string, owner types.UID, pods []*jobpod.Pod) {
	s.jobs.settle(namespace, name, owner, pods)
}

// Unsettle brings every settled pod of the job back into ListUnsettled.
func (s *Source) Unsettle(namespace, name string) {
	s.jobs.unsettle(namespace, name)
}
