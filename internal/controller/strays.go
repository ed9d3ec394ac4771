package controller

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// strayPod is a pod that carries the operator's finalizers but no longer
// belongs to the job that controls it (jobpod.Pod.Strayed): someone edited
// its labels, or its controller reference.
type strayPod struct {
	namespace, name string
	uid             types.UID
	// owner is the job whose controller reference the pod carries, "" if
	// none names an IndexedBatchJob; jobName is its job-name label.
	owner   types.UID
	jobName string
}

// strayReleases lets go of stray pods, as upstream's Job controller
// releases a pod that no longer matches its selector: one patch removes
// the operator's finalizers and the job's controller reference, so that
// the pod is nobody's and can be deleted, and then wakes the job, which
// no longer lists the pod and runs its index again. The pod cache reports
// a stray the moment it sees one (podcache.Options.Strayed), including a
// pod that left the cache's watch with its controller-uid label.
//
// Nothing is lost with the queue: a pod still cached and still stray is
// reported again by its next event, and a sync of its job releases every
// pod labelled with the job's name that the job does not hold (ownPods).
type strayReleases struct {
	r     *Reconciler
	queue workqueue.TypedRateLimitingInterface[strayPod]
}

func newStrayReleases(r *Reconciler) *strayReleases {
	return &strayReleases{
		r: r,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[strayPod](),
			workqueue.TypedRateLimitingQueueConfig[strayPod]{Name: "stray-pods"}),
	}
}

// add queues a stray pod the cache reported, and forgets its create if the
// job still expects to see it.
func (s *strayReleases) add(pod *jobpod.Pod) {
	if pod.OwnerUID != "" {
		s.r.jobs.createLeft(pod.OwnerUID, pod.Name)
	}
	s.queue.Add(strayPod{namespace: pod.Namespace, name: pod.Name, uid: pod.UID, owner: pod.OwnerUID, jobName: pod.JobName})
}

// size is how many strays wait, for trackedEntries.
func (s *strayReleases) size() int { return s.queue.Len() }

// Start releases the queued strays until ctx ends (a manager Runnable).
func (s *strayReleases) Start(ctx context.Context) error {
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for s.next(ctx) {
	}
	return nil
}

// NeedLeaderElection: only the leader writes pods.
func (s *strayReleases) NeedLeaderElection() bool { return true }

func (s *strayReleases) next(ctx context.Context) bool {
	p, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(p)
	if err := s.release(ctx, p); err != nil {
		log.FromContext(ctx).Error(err, "Releasing a stray pod", "pod", klog.KRef(p.namespace, p.name))
		s.queue.AddRateLimited(p)
		return true
	}
	s.queue.Forget(p)
	return true
}

// release patches the pod free and wakes its job. A pod gone, or a new pod
// of the same name (the patch names the UID), is left alone.
func (s *strayReleases) release(ctx context.Context, p strayPod) error {
	patch, err := strayPatch(p)
	if err != nil {
		return err
	}
	pod := &jobpod.Pod{Meta: jobpod.Meta{Name: p.name, Namespace: p.namespace, UID: p.uid}}
	err = s.r.patchPod(ctx, pod, patch)
	switch {
	case apierrors.IsNotFound(err), apierrors.IsConflict(err), apierrors.IsInvalid(err):
		return nil
	case err != nil:
		return fmt.Errorf("releasing stray pod %s: %w", p.name, err)
	}
	log.FromContext(ctx).Info("Released a pod that no longer belongs to its job", "pod", klog.KRef(p.namespace, p.name), "job", p.owner)
	job, ok := s.r.jobOf(ctx, p.namespace, p.jobName, p.owner)
	switch {
	case !ok:
	case p.owner == "":
		s.r.emit(job, foreignPodEvent(p.name))
	default:
		s.r.emit(job, warningEvent("PodReleased", "Released pod %s without counting it: its labels no longer name this job; its index runs again", p.name))
	}
	return nil
}

// strayPatch removes the operator's finalizers and the controller reference
// to the job, if any, from the pod with this UID.
func strayPatch(p strayPod) ([]byte, error) {
	meta := map[string]any{
		"uid":                                 p.uid,
		"$deleteFromPrimitiveList/finalizers": ownFinalizers,
	}
	if p.owner != "" {
		meta["ownerReferences"] = []map[string]any{{"$patch": "delete", "uid": p.owner}}
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

// jobOf finds the job a stray pod left, by its controller reference's UID
// or else by its job-name label, among the jobs this process syncs or else
// in the cache, and queues its sync, so that it sees its pod gone; ok is
// false when no such job is found.
func (r *Reconciler) jobOf(ctx context.Context, namespace, name string, uid types.UID) (*ibjv1.IndexedBatchJob, bool) {
	key := types.NamespacedName{Namespace: namespace, Name: name}
	if uid != "" {
		if k, ok := r.jobs.keyOf(uid); ok {
			key = k
		}
	}
	if key.Name == "" {
		return nil, false
	}
	job := &ibjv1.IndexedBatchJob{}
	if err := r.client.Get(ctx, key, job); err != nil || uid != "" && job.UID != uid {
		return nil, false
	}
	if r.wake != nil {
		r.wake(reconcile.Request{NamespacedName: key})
	}
	return job, true
}
