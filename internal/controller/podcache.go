package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// cachedPod is what the controller keeps of one of its pods: the few facts
// a sync reads, taken from the pod when its watch event arrives. A decoded
// Pod is large even without its spec (the Pod struct itself, and a map for
// each of its labels and annotations); this is a small fraction of it, and
// the pod cache is most of the operator's memory for a large job
// (docs/bench has the measured figures).
type cachedPod struct {
	// podMeta holds the name, namespace, UID, resourceVersion, creation
	// and deletion timestamps and the deletion grace period, nothing more.
	podMeta

	jobName  string    // the job-name label, "" when missing
	ownerUID types.UID // UID of the controlling owner, "" without one
	// index is the completion index from the label (else the annotation);
	// badIndex, when the index is missing or malformed, is the label as
	// written, for the event that reports it.
	index    int32
	indexOK  bool
	badIndex string
	attempt  int32
	failures int32 // the index-failure-count annotation
	ignored  int32 // the index-ignored-failure-count annotation

	phase     corev1.PodPhase
	tracked   bool // carries the tracking finalizer
	discarded bool // its finalizer was removed without counting its end
	ready     bool
	restarts  int32 // container restarts, init containers included
	// finishedAt is when the pod finished, for backoff (see finishTime).
	finishedAt time.Time
	// exits are the terminated containers with a non-zero exit code, init
	// containers first, and conditions the pod's conditions: what a
	// podFailurePolicy rule matches. Kept only for pods not Succeeded.
	exits      []jobpod.Exit
	conditions []jobpod.Condition
}

// compactPod is the pod informer's transform. Anything that is not a Pod
// (an object already compacted, on a resync) passes unchanged.
func compactPod(obj any) (any, error) {
	switch pod := obj.(type) {
	case *wirePod:
		return newCachedPod(&pod.Pod), nil
	case *corev1.Pod:
		return newCachedPod(pod), nil
	}
	return obj, nil
}

func newCachedPod(pod *corev1.Pod) *cachedPod {
	c := &cachedPod{
		podMeta: podMeta{
			Name:                       pod.Name,
			Namespace:                  intern(pod.Namespace),
			UID:                        pod.UID,
			ResourceVersion:            pod.ResourceVersion,
			CreationTimestamp:          pod.CreationTimestamp,
			DeletionTimestamp:          pod.DeletionTimestamp,
			DeletionGracePeriodSeconds: pod.DeletionGracePeriodSeconds,
		},
		jobName:  intern(pod.Labels[ibjv1.JobNameLabel]),
		attempt:  jobpod.Count(pod.Annotations, ibjv1.AttemptAnnotation),
		failures: jobpod.Count(pod.Annotations, ibjv1.IndexFailureCountAnnotation),
		ignored:  jobpod.Count(pod.Annotations, ibjv1.IndexIgnoredFailureCountAnnotation),
		phase:    internPhase(pod.Status.Phase),
	}
	if _, ok := pod.Annotations[discardedAnnotation]; ok {
		c.discarded = true
	}
	if ref := metav1.GetControllerOf(pod); ref != nil {
		c.ownerUID = types.UID(intern(string(ref.UID)))
	}
	c.index, c.indexOK = jobpod.Index(pod)
	if !c.indexOK {
		c.badIndex = pod.Labels[ibjv1.CompletionIndexLabel]
	}
	for _, f := range pod.Finalizers {
		if f == ibjv1.TrackingFinalizer {
			c.tracked = true
		}
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodReady {
			c.ready = cond.Status == corev1.ConditionTrue
			break
		}
	}
	for _, lists := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, cs := range lists {
			c.restarts += cs.RestartCount
		}
	}
	if c.phase != corev1.PodSucceeded {
		c.exits = jobpod.Exits(pod)
		c.conditions = jobpod.Conditions(pod)
	}
	c.finishedAt = jobpod.FinishTime(pod)
	return c
}

// intern returns the canonical copy of s, so that the pods of one job
// (thousands of them) share one string for what they have in common (their
// namespace, job name and owner) instead of each keeping its decoder's copy.
func intern(s string) string { return unique.Make(s).Value() }

// internPhase returns the package constant for a known phase, so that
// thousands of cached pods share one string instead of each keeping the
// copy its decoder made.
func internPhase(p corev1.PodPhase) corev1.PodPhase {
	for _, known := range []corev1.PodPhase{corev1.PodPending, corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, corev1.PodUnknown} {
		if p == known {
			return known
		}
	}
	return p
}

// podJobKey is the key of PodJobNameIndex: namespace/job-name.
func podJobKey(obj any) ([]string, error) {
	if pod, ok := obj.(*cachedPod); ok && pod.jobName != "" {
		return []string{pod.Namespace + "/" + pod.jobName}, nil
	}
	return nil, nil
}

// podSource watches the operator's pods (those with the controller-uid
// label) with informers of its own: one for all namespaces, or one per
// namespace under --namespaces. It keeps cachedPods, indexed by job, and
// queues the job named in a pod's job-name label on every event, so that
// pods left by a deleted job still reach a sync that releases them. The
// informers start with the controller, so a standby replica caches no pods.
type podSource struct {
	informers map[string]toolscache.SharedIndexInformer // by namespace; "" is all
	// finalizerGone, if set, hears of every pod the cache shows losing its
	// tracking finalizer or gone.
	finalizerGone func(*cachedPod)
	// cached counts the pods the informers hold, kept by the event handler
	// (every pod the cache takes in is an add, every one it drops a
	// delete), so that a metrics scrape does not list every key.
	cached atomic.Int64
}

func newPodSource(cfg *rest.Config, namespaces []string) (*podSource, error) {
	// Pods are read in protobuf as wirePods (podwire.go): without the spec
	// and the managed fields, which no sync reads, and from a watch event's
	// bytes in place (podwatch.go).
	pods, err := coreV1ProtobufClient(cfg, wireSerializer)
	if err != nil {
		return nil, err
	}
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	s := &podSource{informers: map[string]toolscache.SharedIndexInformer{}}
	for _, ns := range namespaces {
		lw := toolscache.NewFilteredListWatchFromClient(pods, "pods", ns, func(o *metav1.ListOptions) {
			o.LabelSelector = ibjv1.ControllerUIDLabel
		})
		inf := toolscache.NewSharedIndexInformerWithOptions(lw, &wirePod{}, toolscache.SharedIndexInformerOptions{
			Indexers:          toolscache.Indexers{PodJobNameIndex: podJobKey},
			ObjectDescription: "pods of IndexedBatchJobs",
		})
		if err := inf.SetTransform(compactPod); err != nil {
			return nil, err
		}
		s.informers[ns] = inf
	}
	return s, nil
}

// podEventPriority is the queue priority of a sync that a pod event asks
// for: above the default of a job's own events (a new job), so that jobs
// whose pods are running or have just finished are synced before new jobs
// start, and a fleet of jobs created together finishes in order rather
// than all at the end.
const podEventPriority = 1

// Start registers the event handler and runs the informers until ctx ends.
func (s *podSource) Start(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
	handler := s.handler(podEventAdder(queue))
	for _, inf := range s.informers {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return err
		}
		go inf.RunWithContext(ctx)
	}
	return nil
}

// handler queues the job named by a pod's job-name label on the pod's
// events, except a succeeded pod's release (releasedAfterSuccess), and
// tells finalizerGone of each pod the cache shows let go or gone.
func (s *podSource) handler(add func(reconcile.Request)) toolscache.ResourceEventHandlerFuncs {
	enqueue := func(pod *cachedPod) {
		if pod.jobName != "" {
			add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: pod.Namespace, Name: pod.jobName}})
		}
	}
	letGo := func(pod *cachedPod) {
		if s.finalizerGone != nil {
			s.finalizerGone(pod)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if pod, ok := obj.(*cachedPod); ok {
				s.cached.Add(1)
				enqueue(pod)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, ok1 := oldObj.(*cachedPod)
			pod, ok2 := obj.(*cachedPod)
			if !ok1 || !ok2 {
				return
			}
			if old.tracked && !pod.tracked {
				letGo(pod)
			}
			if !releasedAfterSuccess(old, pod) {
				enqueue(pod)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if pod, ok := obj.(*cachedPod); ok {
				s.cached.Add(-1)
				letGo(pod)
				enqueue(pod)
			}
		},
	}
}

// releasedAfterSuccess reports whether a pod update only took the tracking
// finalizer off a pod that had succeeded already. Such a pod is counted by
// its index, which the written status holds before its finalizer goes, so
// its release changes nothing a sync decides: it queues no sync, and the
// thousands of releases that end a large job do not each cost one.
func releasedAfterSuccess(old, pod *cachedPod) bool {
	return old.phase == corev1.PodSucceeded && pod.phase == corev1.PodSucceeded &&
		old.tracked && !pod.tracked && (old.DeletionTimestamp == nil) == (pod.DeletionTimestamp == nil)
}

// podEventAdder queues a sync at podEventPriority when the controller's
// queue has priorities (controller-runtime's default), else plainly.
func podEventAdder(queue workqueue.TypedRateLimitingInterface[reconcile.Request]) func(reconcile.Request) {
	pq, ok := queue.(priorityqueue.PriorityQueue[reconcile.Request])
	if !ok {
		return queue.Add
	}
	return func(req reconcile.Request) {
		pq.AddWithOpts(priorityqueue.AddOpts{Priority: ptr.To(podEventPriority)}, req)
	}
}

// WaitForSync returns once every informer has listed its pods.
func (s *podSource) WaitForSync(ctx context.Context) error {
	synced := make([]toolscache.InformerSynced, 0, len(s.informers))
	for _, inf := range s.informers {
		synced = append(synced, inf.HasSynced)
	}
	if !toolscache.WaitForCacheSync(ctx.Done(), synced...) {
		return errors.New("timed out waiting for the pod informers to sync")
	}
	return nil
}

// size is how many pods the informers cache, for trackedEntries.
func (s *podSource) size() int { return int(s.cached.Load()) }

func (s *podSource) String() string { return "pods of IndexedBatchJobs" }

// list returns the cached pods labelled with the job's name. They are the
// cache's own objects: read them, never write to them.
func (s *podSource) list(namespace, name string) ([]*cachedPod, error) {
	inf := s.informers[metav1.NamespaceAll]
	if inf == nil {
		if inf = s.informers[namespace]; inf == nil {
			return nil, nil
		}
	}
	objs, err := inf.GetIndexer().ByIndex(PodJobNameIndex, namespace+"/"+name)
	if err != nil {
		return nil, err
	}
	pods := make([]*cachedPod, 0, len(objs))
	for _, o := range objs {
		if pod, ok := o.(*cachedPod); ok {
			pods = append(pods, pod)
		}
	}
	return pods, nil
}
