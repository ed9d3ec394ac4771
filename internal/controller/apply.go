package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// maxWritesPerSync bounds the pod creates, deletes and patches one sync
// sends at once. At a high QPS it is well above what the client's token
// bucket lets through per tick (see internal/throttle), so that the
// requests a tick releases go out together; the QPS limit, not this, bounds
// the load on the API server.
const maxWritesPerSync = 64

// MaxWritesPerSync is maxWritesPerSync, for the window of a
// serverload.Monitor the reconciler follows.
const MaxWritesPerSync = maxWritesPerSync

// writeQueueSeconds is how long, at most, the writes the syncs have in
// flight together may wait for the client's rate limiter: the writes one
// sync sends at once are bounded so that every concurrent sync's together
// fill at most this many seconds of the QPS budget. A request waits a
// moment, not the tens of seconds that would exceed a context's deadline,
// whatever --kube-api-qps and --max-concurrent-reconciles are. It is also
// about how long a sync with many pods to create keeps its worker while
// other jobs wait (createPods), and so what a large job adds to each step
// of a small one.
const writeQueueSeconds = 1

// writesPerSync is how many writes one sync sends at once for the client's
// qps and the concurrent syncs: at least one, at most maxWritesPerSync
// (also where the config states no QPS, as a test's may not).
func writesPerSync(qps float32, syncs int) int {
	if qps <= 0 {
		return maxWritesPerSync
	}
	n := int(float64(qps) * writeQueueSeconds / float64(max(syncs, 1)))
	return min(max(n, 1), maxWritesPerSync)
}

// apply carries out a plan in the order that keeps every result: pod
// deletes and creates, the status in one write, then the finalizer
// removals (only once the status holding their results is written; those
// off the critical path go to the background queue), then events and
// metrics.
func (r *Reconciler) apply(ctx context.Context, job *ibjv1.IndexedBatchJob, p plan) (ctrl.Result, error) {
	if p.deleteJob {
		return ctrl.Result{}, r.deleteFinishedJob(ctx, job)
	}
	deleteErr := errors.Join(r.failStuckPods(ctx, job, p.failStuck), r.deletePods(ctx, job, p.delete))
	took, yielded, createErrs := r.createPods(ctx, job, p.create)
	created := countTaken(took)
	p.memoryRaised = createdOnly(p.memoryRaised, p.create, took, job)
	createErr := errors.Join(createErrs...)
	if len(p.create) > 0 {
		r.jobs.createsRefused(job.UID, createErr != nil, r.clock.Now())
	}
	if mutated := slices.ContainsFunc(createErrs, isMutated); mutated || created > 0 {
		r.jobs.createsMutated(job.UID, mutated, r.clock.Now())
		if mutated && onlyMutated(createErrs) {
			// The status and an event say why; the job waits, and the
			// next sync comes then, not with the rate limiter's retry.
			createErr = nil
			p.requeue(r.jobs.mutatedUntil(job, r.clock.Now()).Sub(r.clock.Now()))
		}
	}
	if d := jobpod.CreateRefusedDelay(job); d > 0 && createErr != nil {
		// The job asked to wait this long after a refusal (its status and
		// a FailedCreate event say why): the next sync comes then, not
		// with the rate limiter's retry of a failed sync.
		createErr = nil
		p.requeue(d)
	}
	if yielded {
		// The rest after the jobs that wait now.
		p.requeue(nextTurn)
	}
	p.status.Active -= int32(len(p.create) - created)
	// What stops the job's pods shows in its status (condition
	// PodCreationFailed, and the phase), not only in events. The error
	// returned below retries the sync with the controller's rate limiter.
	// Within a minute of a mutated create, condition PodMutated stays
	// through creates as asked for, and the sync at the minute's end
	// clears it.
	mutatedPacing := false
	if ends := r.jobs.mutatedMinuteEnds(job.UID); ends.After(r.clock.Now()) {
		mutatedPacing = true
		p.requeue(ends.Sub(r.clock.Now()))
	}
	setPodCreation(&p.status, job.Generation, r.clock.Now(), len(p.create) > 0, mutatedPacing, firstError(createErrs))
	setPhase(&p.status)
	var releaseErr error
	if p.holdStatus > 0 && (onlyCountersMoved(&job.Status, &p.status) ||
		!p.holdStart.IsZero() && firstStatusOnly(&job.Status, &p.status)) {
		// Only counters moved, and the last write was a moment ago (or
		// this is the job's first status, a moment after its start): the
		// sync that writes them records these pods (and counts them in the
		// metrics); until then they keep their finalizers.
		r.jobs.holdStart(job.UID, p.holdStart)
		p.requeue(p.holdStatus)
		r.settle(job, p.settle)
	} else {
		if err := r.writeStatus(ctx, job, p.status); err != nil {
			// Nothing recorded in this status may lose its finalizer.
			return ctrl.Result{}, errors.Join(deleteErr, createErr, err)
		}
		// The status now holds every result recorded in this sync; the
		// failure record, how each failure came about, before its pod
		// may go.
		if err := r.writeFailures(ctx, job); err != nil {
			return ctrl.Result{}, errors.Join(deleteErr, createErr, err)
		}
		r.later.add(job.UID, p.releaseLater)
		r.settle(job, p.settle, p.settleReleased...)
		releaseErr = errors.Join(
			r.releaseFinalizers(ctx, job.UID, p.removeFinalizer, r.removeFinalizer),
			r.releaseFinalizers(ctx, job.UID, p.discard, r.discardPod),
			r.releaseFinalizers(ctx, job.UID, p.countHeld, r.countHeldPod),
		)
		recordMetrics(ctx, job, p)
	}
	if wait := r.emitEvents(job, p, created); wait > 0 {
		p.requeue(wait)
	}
	if err := errors.Join(deleteErr, createErr, releaseErr); err != nil {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: p.requeueAfter}, nil
}

// deletePods deletes the pods, first removing the tracking finalizer of
// those whose end must not count.
func (r *Reconciler) deletePods(ctx context.Context, job *ibjv1.IndexedBatchJob, deletions []podDeletion) error {
	logger := log.FromContext(ctx)
	return r.parallel(ctx, len(deletions), func(i int) error {
		d := deletions[i]
		if d.stripFinalizer && d.pod.Finalized() {
			if err := r.discardPod(ctx, d.pod); err != nil {
				return err
			}
		}
		if err := r.client.Delete(ctx, podRef(d.pod)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting pod %s: %w", d.pod.Name, err)
		}
		podsDeleted.WithLabelValues(metricReason(d.reason)).Inc()
		logger.V(2).Info("Deleted pod", "pod", klog.KObj(d.pod), "reason", d.reason)
		if d.event != nil {
			r.emit(job, *d.event)
		}
		return nil
	})
}

// +kubebuilder:rbac:groups="",resources=pods/status,verbs=patch

// failStuckPods writes Failed the pods still terminating past the job's
// terminatingTimeoutSeconds, as pod garbage collection writes a pod on an
// out-of-service node: phase Failed and condition DisruptionTarget, here
// with reason TerminatingTimeout. The next sync records them as any failed
// pod.
func (r *Reconciler) failStuckPods(ctx context.Context, job *ibjv1.IndexedBatchJob, pods []*jobpod.Pod) error {
	if len(pods) == 0 {
		return nil
	}
	now := metav1.NewTime(r.clock.Now())
	return r.parallel(ctx, len(pods), func(i int) error {
		pod := pods[i]
		msg := fmt.Sprintf("Pod was still terminating %ds after its deletion deadline (spec.terminatingTimeoutSeconds of IndexedBatchJob %s): its kubelet does not answer",
			ptr.Deref(job.Spec.TerminatingTimeoutSeconds, 0), job.Name)
		status := map[string]any{"phase": corev1.PodFailed}
		if !slices.Contains(pod.Conditions, jobpod.Condition{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}) {
			// The taint eviction's own DisruptionTarget, if any, stays.
			status["conditions"] = []corev1.PodCondition{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue,
				Reason: ibjv1.ReasonTerminatingTimeout, Message: msg, LastTransitionTime: now}}
		}
		patch, err := json.Marshal(struct {
			Status map[string]any `json:"status"`
		}{status})
		if err != nil {
			return err
		}
		target := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace}}
		if err := r.client.Status().Patch(ctx, target, client.RawPatch(types.StrategicMergePatchType, patch)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("writing pod %s Failed after terminatingTimeoutSeconds: %w", pod.Name, err)
		}
		log.FromContext(ctx).Info("Wrote a pod stuck terminating Failed", "pod", klog.KObj(pod), "terminatingTimeoutSeconds", ptr.Deref(job.Spec.TerminatingTimeoutSeconds, 0))
		r.emit(job, warningEvent("PodTerminatingTimeout", "Pod %s was still terminating %ds after its deletion deadline: written Failed (DisruptionTarget), its index is replaced",
			pod.Name, ptr.Deref(job.Spec.TerminatingTimeoutSeconds, 0)))
		return nil
	})
}

// writeStatus writes the status if it changed, and remembers the
// resourceVersion so that a sync on a cache older than this write waits.
func (r *Reconciler) writeStatus(ctx context.Context, job *ibjv1.IndexedBatchJob, status ibjv1.IndexedBatchJobStatus) error {
	if equality.Semantic.DeepEqual(job.Status, status) {
		return nil
	}
	updated := job.DeepCopy()
	updated.Status = status
	if err := r.client.Status().Update(ctx, updated); err != nil {
		return fmt.Errorf("updating status: %w", err)
	}
	r.jobs.wroteStatus(job.UID, updated.ResourceVersion, r.clock.Now())
	return nil
}

// releaseFinalizers lets go of the job's pods with release (removeFinalizer
// or discardPod), but not again of those whose finalizer an earlier sync
// removed and the cache does not show gone yet, and remembers the ones it
// released.
func (r *Reconciler) releaseFinalizers(ctx context.Context, job types.UID, pods []*jobpod.Pod, release func(context.Context, *jobpod.Pod) error) error {
	pods = r.jobs.unpatched(job, pods)
	errs := make([]error, len(pods))
	_ = r.parallel(ctx, len(pods), func(i int) error {
		errs[i] = release(ctx, pods[i])
		return nil
	})
	done := make([]*jobpod.Pod, 0, len(pods))
	for i, pod := range pods {
		if errs[i] == nil {
			done = append(done, pod)
		}
	}
	r.jobs.removedFinalizers(job, done, r.clock.Now())
	return errors.Join(errs...)
}

// removeFinalizer removes the operator's finalizers (tracking and
// index-retry) from a pod whose result is recorded, or that is not the
// job's to count.
func (r *Reconciler) removeFinalizer(ctx context.Context, pod *jobpod.Pod) error {
	return r.patchFinalizer(ctx, pod, removeFinalizerPatch)
}

// discardPod removes the finalizers and marks the pod discarded in the same
// patch, so that its end is never counted (suspend, excess pods, lingering
// pods after success).
func (r *Reconciler) discardPod(ctx context.Context, pod *jobpod.Pod) error {
	return r.patchFinalizer(ctx, pod, discardPatch)
}

// countHeldPod removes only the tracking finalizer of a pod heldForRetry:
// its failure is counted, and its index-retry finalizer keeps it as its
// index's record until the next pod exists.
func (r *Reconciler) countHeldPod(ctx context.Context, pod *jobpod.Pod) error {
	return r.patchFinalizer(ctx, pod, countHeldPatch)
}

// finalizerPatch is a strategic merge patch that removes the listed
// finalizers of this controller, leaving other finalizers alone, needs no
// resourceVersion, and adds the annotations.
func finalizerPatch(finalizers []string, annotations map[string]string) []byte {
	meta := map[string]any{"$deleteFromPrimitiveList/finalizers": finalizers}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	patch, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		panic(err) // strings only: cannot fail
	}
	return patch
}

// The finalizer patches, made once: nearly every pod gets one.
var (
	ownFinalizers        = []string{ibjv1.TrackingFinalizer, ibjv1.IndexRetryFinalizer}
	removeFinalizerPatch = finalizerPatch(ownFinalizers, nil)
	discardPatch         = finalizerPatch(ownFinalizers, map[string]string{ibjv1.DiscardedAnnotation: "true"})
	countHeldPatch       = finalizerPatch([]string{ibjv1.TrackingFinalizer}, nil)
)

// patchFinalizer sends a finalizer patch.
func (r *Reconciler) patchFinalizer(ctx context.Context, pod *jobpod.Pod, patch []byte) error {
	if err := client.IgnoreNotFound(r.patchPod(ctx, pod, patch)); err != nil {
		return fmt.Errorf("removing the finalizers of pod %s: %w", pod.Name, err)
	}
	log.FromContext(ctx).V(3).Info("Removed finalizers", "pod", klog.KObj(pod))
	return nil
}

// deleteFinishedJob deletes the pods of a job whose ttlSecondsAfterFinished
// passed, then the job. The pods go first so that nothing is left even on a
// cluster without a garbage collector.
func (r *Reconciler) deleteFinishedJob(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
	listed, err := r.pods.List(job.Namespace, job.Name)
	if err != nil {
		return err
	}
	own, foreign := splitByOwner(listed, job.UID)
	if err := r.forEachPod(ctx, foreign, r.removeFinalizer); err != nil {
		return err
	}
	if err := r.forEachPod(ctx, own, func(ctx context.Context, pod *jobpod.Pod) error {
		// A pod whose finalizer was left for later would stay after the job.
		if pod.Finalized() {
			if err := r.removeFinalizer(ctx, pod); err != nil {
				return err
			}
		}
		return client.IgnoreNotFound(r.client.Delete(ctx, podRef(pod)))
	}); err != nil {
		return err
	}
	err = r.client.Delete(ctx, job, client.PropagationPolicy("Background"), client.Preconditions{UID: &job.UID})
	if err == nil {
		log.FromContext(ctx).Info("Deleted job after ttlSecondsAfterFinished", "ttlSecondsAfterFinished", ptr.Deref(job.Spec.TTLSecondsAfterFinished, 0))
	}
	if err = client.IgnoreNotFound(err); err == nil {
		r.jobs.forget(job.UID)
	}
	return err
}

// emitEvents reports what the sync did, once its status is written, with
// the job's repeated events paced (event_pace.go); it returns when the sync
// should come back to report what the pace held back.
func (r *Reconciler) emitEvents(job *ibjv1.IndexedBatchJob, p plan, created int) time.Duration {
	if r.recorder == nil {
		return 0
	}
	events, wait := r.jobs.pacedEvents(job.UID, job.Name, &p, created, r.clock.Now())
	for _, e := range events {
		r.emit(job, e)
	}
	return wait
}

func (r *Reconciler) emit(job *ibjv1.IndexedBatchJob, e event) {
	if r.recorder != nil {
		r.recorder.Eventf(job, nil, e.eventType, e.reason, "Sync", "%s", e.message)
	}
}

// podRef is a pod to name in a write. The pods a sync sees are the cache's
// own objects (listed without a copy, which for a job of 100,000 pods saves
// copying them all on every sync), so a write must never decode its
// response into them. As object metadata, it makes controller-runtime send
// the write through its metadata client, which asks the API server for the
// pod's metadata only in the response: the finalizer patch, one per pod,
// then decodes a few hundred bytes instead of the whole pod.
func podRef(pod *jobpod.Pod) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
	}
}

// forEachPod runs f over the pods, r.writes at a time, and joins errors.
func (r *Reconciler) forEachPod(ctx context.Context, pods []*jobpod.Pod, f func(context.Context, *jobpod.Pod) error) error {
	return r.parallel(ctx, len(pods), func(i int) error { return f(ctx, pods[i]) })
}

// parallel runs f for 0…n-1, writeWindow at a time, and joins errors.
func (r *Reconciler) parallel(ctx context.Context, n int, f func(i int) error) error {
	if n == 0 {
		return nil
	}
	errs := make([]error, n)
	workqueue.ParallelizeUntil(ctx, r.writeWindow(), n, func(i int) { errs[i] = f(i) })
	return errors.Join(errs...)
}

// observeSync records how long a sync took and whether it failed.
func observeSync(start time.Time, err *error) {
	result := "success"
	if *err != nil {
		result = "error"
	}
	syncDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
}

// createPod creates the pod through podWrites, or through the client when
// there is none, and returns it as the API server created it: its
// metadata, and with withSpec its spec (podcache.Writer.Create).
func (r *Reconciler) createPod(ctx context.Context, pod *corev1.Pod, withSpec bool) (*corev1.Pod, error) {
	if r.podWrites == nil {
		sent := pod.DeepCopy()
		return sent, r.client.Create(ctx, sent)
	}
	return r.podWrites.Create(ctx, pod, withSpec)
}

// patchPod applies a strategic merge patch to the pod through podWrites,
// or through the client when there is none.
func (r *Reconciler) patchPod(ctx context.Context, pod *jobpod.Pod, patch []byte) error {
	if r.podWrites == nil {
		return r.client.Patch(ctx, podRef(pod), client.RawPatch(types.StrategicMergePatchType, patch))
	}
	return r.podWrites.Patch(ctx, pod.Namespace, pod.Name, patch)
}
