// Package controller reconciles IndexedBatchJobs: a thin reconciler (this
// file) around a pure decision core (sync.go and its helpers).
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// PodJobNameIndex indexes the cached pods by their job-name label, so a sync
// finds its pods, and pods left behind by a deleted job of the same name,
// without scanning the namespace.
const PodJobNameIndex = "batch.indexedjob.dev/job-name"

// apiParallelism bounds the pod creates, deletes and patches one sync sends
// at once. It is well above what the client's token bucket lets through per
// tick (see internal/throttle), so that the requests a tick releases go out
// together; the QPS limit, not this, bounds the load on the API server.
const apiParallelism = 64

// Reconciler runs IndexedBatchJobs.
type Reconciler struct {
	Client   client.Client
	Scheme   *runtime.Scheme
	Recorder events.EventRecorder
	Clock    clock.PassiveClock
	Backoff  Backoff

	once sync.Once
	exp  *expectations
	// pods is the cache of the job's pods (see podSource), set up by
	// SetupWithManager.
	pods *podSource
	// uids maps a job's namespaced name to the UID its expectations are kept
	// under, so that they are dropped when the job is found gone.
	uids sync.Map
}

// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs/status,verbs=get;update
// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile reads the job and its pods from the cache, lets syncJob decide,
// then applies the plan: pod deletes and creates, the status in one write,
// finalizer removals (only after the status holding their results is
// written), events and metrics.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	r.init()
	start := time.Now()
	defer func() {
		result := "success"
		if err != nil {
			result = "error"
		}
		syncDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	}()
	logger := log.FromContext(ctx)

	job := &ibjv1.IndexedBatchJob{}
	if err := r.Client.Get(ctx, req.NamespacedName, job); err != nil {
		if apierrors.IsNotFound(err) {
			if uid, ok := r.uids.LoadAndDelete(req.NamespacedName); ok {
				r.exp.forget(uid.(types.UID))
			}
			return ctrl.Result{}, r.releaseOrphans(ctx, req.Namespace, req.Name, "")
		}
		return ctrl.Result{}, err
	}
	if m := job.Spec.ManagedBy; m != nil && *m != ibjv1.ControllerName {
		logger.V(4).Info("Skipped job managed by another controller", "managedBy", *m)
		return ctrl.Result{}, nil
	}
	if old, loaded := r.uids.Swap(req.NamespacedName, job.UID); loaded && old.(types.UID) != job.UID {
		r.exp.forget(old.(types.UID)) // the job was deleted and created again
	}
	if job.DeletionTimestamp != nil {
		r.exp.forget(job.UID)
		return ctrl.Result{}, r.releaseOrphans(ctx, job.Namespace, job.Name, "")
	}
	if r.exp.jobStale(job.UID, job.ResourceVersion) {
		// Our own last status write is not in the cache yet; its update
		// event will bring the job back. Deciding now could retry an index
		// that write marked failed.
		return ctrl.Result{RequeueAfter: time.Second}, nil
	}

	listed, err := r.listPods(ctx, job.Namespace, job.Name)
	if err != nil {
		return ctrl.Result{}, err
	}
	pods := make([]*cachedPod, 0, len(listed))
	var strangers []*cachedPod
	for _, pod := range listed {
		if pod.ownerUID == job.UID {
			pods = append(pods, pod)
		} else if hasTrackingFinalizer(pod) {
			strangers = append(strangers, pod)
		}
	}
	if err := r.patchAll(ctx, strangers, func(pod *cachedPod) error { return r.removeFinalizer(ctx, pod, false) }); err != nil {
		return ctrl.Result{}, err
	}
	for _, pod := range strangers {
		r.event(job, true, "ForeignPod", "Released pod %s without counting it: it carries this job's labels but is not controlled by it", pod.Name)
	}

	now := r.Clock.Now()
	r.exp.observeFinalizers(job.UID, pods, now)
	p := syncJob(syncInput{
		job:                   job,
		pods:                  pods,
		now:                   now,
		backoff:               r.Backoff,
		expectationsSatisfied: r.exp.podsSeen(job.UID, pods, now),
	})
	return r.apply(ctx, job, p)
}

func (r *Reconciler) init() {
	r.once.Do(func() {
		r.exp = newExpectations()
		if r.Clock == nil {
			r.Clock = clock.RealClock{}
		}
		if r.Backoff.Base == 0 {
			r.Backoff = DefaultBackoff
		}
	})
}

func (r *Reconciler) apply(ctx context.Context, job *ibjv1.IndexedBatchJob, p plan) (ctrl.Result, error) {
	logger := log.FromContext(ctx)
	var errs []error

	if p.deleteJob {
		return ctrl.Result{}, r.deleteFinishedJob(ctx, job, p)
	}

	errs = append(errs, parallel(ctx, len(p.delete), func(i int) error {
		d, pod := p.delete[i], p.delete[i].pod
		if d.stripFinalizer && hasTrackingFinalizer(pod) {
			if err := r.removeFinalizer(ctx, pod, true); err != nil {
				return err
			}
		}
		if err := r.Client.Delete(ctx, podRef(pod)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting pod %s: %w", pod.Name, err)
		}
		podsDeleted.WithLabelValues(d.reason).Inc()
		logger.V(2).Info("Deleted pod", "pod", klog.KObj(pod), "reason", d.reason)
		return nil
	}))
	deleted := len(p.delete)

	createErrs := make([]error, len(p.create))
	_ = parallel(ctx, len(p.create), func(i int) error {
		c := p.create[i]
		pod := newPod(job, c)
		r.exp.expectCreate(job.UID, pod.Name, r.Clock.Now())
		reason := "new"
		if c.attempt > 0 {
			reason = "retry"
		}
		err := r.Client.Create(ctx, pod)
		switch {
		case err == nil:
			podsCreated.WithLabelValues(reason, "succeeded").Inc()
			logger.V(2).Info("Created pod", "pod", klog.KObj(pod), "index", c.index, "attempt", c.attempt)
		case apierrors.IsAlreadyExists(err):
			// Created by an earlier sync whose create the cache has not
			// shown yet: the deterministic name kept it from doubling.
		default:
			r.exp.createFailed(job.UID, pod.Name)
			podsCreated.WithLabelValues(reason, "failed").Inc()
			r.event(job, true, "FailedCreate", "Error creating pod %s: %v", pod.Name, err)
			createErrs[i] = fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		return nil
	})
	failedCreates := 0
	for _, err := range createErrs {
		if err != nil {
			failedCreates++
			errs = append(errs, err)
		}
	}
	p.status.Active -= int32(failedCreates)

	if !equality.Semantic.DeepEqual(job.Status, p.status) {
		updated := job.DeepCopy()
		updated.Status = p.status
		if err := r.Client.Status().Update(ctx, updated); err != nil {
			// Nothing recorded in this status may lose its finalizer.
			return ctrl.Result{}, errors.Join(append(errs, fmt.Errorf("updating status: %w", err))...)
		}
		r.exp.wroteStatus(job.UID, updated.ResourceVersion)
	}

	// The status now holds every result recorded in this sync.
	errs = append(errs,
		r.releaseFinalizers(ctx, job.UID, p.removeFinalizer, false),
		r.releaseFinalizers(ctx, job.UID, p.discard, true),
	)

	created := len(p.create) - failedCreates
	if created > 0 {
		r.event(job, false, "SuccessfulCreate", "Created %d pod(s)", created)
	}
	if deleted > 0 {
		r.event(job, false, "SuccessfulDelete", "Deleted %d pod(s)", deleted)
	}
	for _, e := range p.events {
		r.event(job, e.warning, e.reason, "%s", e.message)
	}
	perIndex := boolLabel(job.Spec.BackoffLimitPerIndex != nil)
	for _, f := range p.recorded {
		if f.succeeded {
			podsFinished.WithLabelValues("succeeded").Inc()
		} else {
			podsFinished.WithLabelValues("failed").Inc()
		}
	}
	if p.newlyCompleted > 0 {
		finishedIndexes.WithLabelValues("succeeded", perIndex).Add(float64(p.newlyCompleted))
	}
	if p.newlyFailedIndexes > 0 {
		finishedIndexes.WithLabelValues("failed", perIndex).Add(float64(p.newlyFailedIndexes))
	}
	if c := p.newlyFinished; c != nil {
		jobsFinished.WithLabelValues(c.Type, c.Reason).Inc()
		logger.Info("Job finished", "condition", c.Type, "reason", c.Reason)
	}

	if err := errors.Join(errs...); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: p.requeueAfter}, nil
}

// deleteFinishedJob deletes the pods of a job whose ttlSecondsAfterFinished
// passed, then the job. The pods go first so that nothing is left even on a
// cluster without a garbage collector.
func (r *Reconciler) deleteFinishedJob(ctx context.Context, job *ibjv1.IndexedBatchJob, p plan) error {
	if err := r.releaseOrphans(ctx, job.Namespace, job.Name, job.UID); err != nil {
		return err
	}
	listed, err := r.listPods(ctx, job.Namespace, job.Name)
	if err != nil {
		return err
	}
	pods := make([]*cachedPod, 0, len(listed))
	for _, pod := range listed {
		if pod.ownerUID == job.UID {
			pods = append(pods, pod)
		}
	}
	if err := r.patchAll(ctx, pods, func(pod *cachedPod) error {
		return client.IgnoreNotFound(r.Client.Delete(ctx, podRef(pod)))
	}); err != nil {
		return err
	}
	err = r.Client.Delete(ctx, job, client.PropagationPolicy("Background"), client.Preconditions{UID: &job.UID})
	if err = client.IgnoreNotFound(err); err == nil {
		r.exp.forget(job.UID)
		log.FromContext(ctx).Info("Deleted job after ttlSecondsAfterFinished", "ttlSecondsAfterFinished", ptr.Deref(job.Spec.TTLSecondsAfterFinished, 0))
	}
	return err
}

// releaseOrphans removes the tracking finalizer from pods named after the
// job that it does not own (its UID is not keep): pods of a deleted job,
// or of an earlier job of the same name, must not stay stuck.
func (r *Reconciler) releaseOrphans(ctx context.Context, namespace, name string, keep types.UID) error {
	listed, err := r.listPods(ctx, namespace, name)
	if err != nil {
		return err
	}
	var orphans []*cachedPod
	for _, pod := range listed {
		if pod.tracked && (keep == "" || pod.ownerUID != keep) {
			orphans = append(orphans, pod)
		}
	}
	return r.patchAll(ctx, orphans, func(pod *cachedPod) error { return r.removeFinalizer(ctx, pod, false) })
}

// removeFinalizer removes only this controller's finalizer, with a strategic
// merge patch that leaves other finalizers alone and needs no
// resourceVersion. discard also marks the pod so its end is never counted.
func (r *Reconciler) removeFinalizer(ctx context.Context, pod *cachedPod, discard bool) error {
	meta := map[string]any{"$deleteFromPrimitiveList/finalizers": []string{ibjv1.TrackingFinalizer}}
	if discard {
		meta["annotations"] = map[string]string{discardedAnnotation: "true"}
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return err
	}
	err = r.Client.Patch(ctx, podRef(pod), client.RawPatch(types.StrategicMergePatchType, patch))
	if err = client.IgnoreNotFound(err); err != nil {
		return fmt.Errorf("removing tracking finalizer of pod %s: %w", pod.Name, err)
	}
	log.FromContext(ctx).V(3).Info("Removed tracking finalizer", "pod", klog.KObj(pod))
	return nil
}

// releaseFinalizers removes the tracking finalizer of the job's pods, but
// not again from those whose removal succeeded in an earlier sync and the
// cache does not show yet, and remembers the ones it removed.
func (r *Reconciler) releaseFinalizers(ctx context.Context, job types.UID, pods []*cachedPod, discard bool) error {
	pods = r.exp.unpatched(job, pods)
	errs := make([]error, len(pods))
	_ = parallel(ctx, len(pods), func(i int) error {
		errs[i] = r.removeFinalizer(ctx, pods[i], discard)
		return nil
	})
	done := make([]*cachedPod, 0, len(pods))
	for i, pod := range pods {
		if errs[i] == nil {
			done = append(done, pod)
		}
	}
	r.exp.removedFinalizers(job, done, r.Clock.Now())
	return errors.Join(errs...)
}

// listPods returns the cached pods labelled with the job's name. They are
// the cache's own objects: read them, never write to them.
func (r *Reconciler) listPods(_ context.Context, namespace, name string) ([]*cachedPod, error) {
	return r.pods.list(namespace, name)
}

// podRef is a pod to name in a write. The pods a sync sees are the cache's
// own objects (listed without a copy, which for a job of 100,000 pods saves
// copying them all on every sync), so a write must never decode its
// response into them. As object metadata, it makes controller-runtime send
// the write through its metadata client, which asks the API server for the
// pod's metadata only in the response: the finalizer patch, one per pod,
// then decodes a few hundred bytes instead of the whole pod.
func podRef(pod *cachedPod) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
	}
}

// patchAll runs f over the pods, apiParallelism at a time, and joins errors.
func (r *Reconciler) patchAll(ctx context.Context, pods []*cachedPod, f func(*cachedPod) error) error {
	return parallel(ctx, len(pods), func(i int) error { return f(pods[i]) })
}

// parallel runs f for 0…n-1, apiParallelism at a time, and joins errors.
func parallel(ctx context.Context, n int, f func(i int) error) error {
	if n == 0 {
		return nil
	}
	errs := make([]error, n)
	workqueue.ParallelizeUntil(ctx, apiParallelism, n, func(i int) { errs[i] = f(i) })
	return errors.Join(errs...)
}

func (r *Reconciler) event(job *ibjv1.IndexedBatchJob, warning bool, reason, format string, args ...any) {
	if r.Recorder == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(job, nil, typ, reason, "Sync", format, args...)
}

func parseVersion(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) }

// SetupWithManager registers the controller: jobs, from the manager's
// cache, and their pods, from a podSource of its own over the given
// namespaces (all when empty).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, namespaces []string, maxConcurrentReconciles int) error {
	pods, err := newPodSource(mgr.GetConfig(), namespaces)
	if err != nil {
		return err
	}
	r.pods = pods
	return ctrl.NewControllerManagedBy(mgr).
		For(&ibjv1.IndexedBatchJob{}).
		WatchesRawSource(pods).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Named("indexedbatchjob").
		Complete(r)
}
