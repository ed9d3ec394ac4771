package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// slowStartInitialBatch is the size of a sync's first batch of creates;
// each batch that all goes through doubles the next, as upstream's
// slowStartBatch.
const slowStartInitialBatch = 1

// nextTurn is the requeue of a job whose sync gave its worker up with
// pods still to create: at once, behind the jobs that wait.
const nextTurn = time.Millisecond

// createPods creates the pods in batches of 1, 2, 4, ... (upstream's slow
// start) and stops at the first batch with a refusal: a job whose creates
// are refused (a full quota, a policy) sends a handful of them per sync,
// not all of its parallelism. A batch is at most r.writes creates, fewer
// while the API server answers slowly (writeWindow), and
// once the sync has sent that many while a job that goes before it waits
// for a worker (r.order: one that came earlier, or came later than a big
// job that was charged for its creates) it stops there (yielded): a job
// with thousands of pods to create takes turns with a job created after
// it, whatever the client's QPS, and a fleet's jobs keep their order. It returns how
// which creates the API server took, whether it yielded, and the error of
// each create (nil where it succeeded or was never sent), in the order of
// creates. A pod that exists already is this job's only if it
// is controlled by it (createdOrTaken).
func (r *Reconciler) createPods(ctx context.Context, job *ibjv1.IndexedBatchJob, creates []podbuild.Spec) (took []bool, yielded bool, errs []error) {
	errs = make([]error, len(creates))
	took = make([]bool, len(creates))
	created := 0
	for start, batch := 0, slowStartInitialBatch; start < len(creates); start, batch = start+batch, min(2*batch, r.writeWindow()) {
		if created >= r.writes && r.othersAhead(job) {
			// This sync has sent its share of the write queue; the worker
			// goes to a job that comes before this one now, and the rest
			// to a later turn.
			return took, true, errs
		}
		end := min(start+batch, len(creates))
		_ = r.parallel(ctx, end-start, func(i int) error {
			took[start+i], errs[start+i] = r.createOne(ctx, job, creates[start+i])
			return nil
		})
		refused, made := 0, 0
		for i, ok := range took[start:end] {
			if ok {
				made++
			} else if errs[start+i] != nil {
				refused++
			}
		}
		created += made
		if r.order != nil {
			r.order.charge(types.NamespacedName{Namespace: job.Namespace, Name: job.Name}, made)
		}
		if refused > 0 {
			skipped := len(creates) - end
			switch first := firstError(errs[start:end]); {
			case !isMutated(first):
				r.emit(job, warningEvent("FailedCreate", "%s%s", refusedBatch(errs[start:end], refused), skippedCreates(skipped)))
			case !podMutatedCondition(&job.Status):
				// Said once: the condition stays while creates come back
				// mutated.
				r.emit(job, warningEvent(ibjv1.ReasonPodMutated, "%s", first.Error()))
			}
			break
		}
	}
	return took, false, errs
}

// onlyMutated: every error of errs is a MutatedPodError (nil ones aside).
func onlyMutated(errs []error) bool {
	for _, err := range errs {
		if err != nil && !isMutated(err) {
			return false
		}
	}
	return true
}

// countTaken is how many creates the API server took.
func countTaken(took []bool) int {
	n := 0
	for _, ok := range took {
		if ok {
			n++
		}
	}
	return n
}

// createdOnly keeps the raises of the pods that were created: a raise is
// reported once, by the sync that made its pod, however many syncs before
// it had their create refused.
func createdOnly(raised []raisedPod, creates []podbuild.Spec, took []bool, job *ibjv1.IndexedBatchJob) []raisedPod {
	if len(raised) == 0 {
		return nil
	}
	made := make(map[string]bool, len(creates))
	for i, c := range creates {
		made[podName(job, c.Index, c.Attempt)] = took[i]
	}
	out := raised[:0:0]
	for _, r := range raised {
		if made[r.pod] {
			out = append(out, r)
		}
	}
	return out
}

// refusedBatch says what a batch's refusals were: the first one's error and
// how many more there were.
func refusedBatch(errs []error, refused int) string {
	msg := "Error " + firstError(errs).Error()
	if refused > 1 {
		msg += fmt.Sprintf(" (and %d more creates refused in the same batch)", refused-1)
	}
	return msg
}

// skippedCreates says how many creates a refusal held back to a later sync.
func skippedCreates(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d more held back until a later sync", n)
}

// createOne creates one pod. took is whether the job now has the pod: it
// was created, or an earlier sync of this process created it and the
// cache has not shown it yet (its deterministic name kept it from
// doubling). err is nil when the pod was not created for a reason that is
// no refusal: its name is taken by a pod the job does not control.
func (r *Reconciler) createOne(ctx context.Context, job *ibjv1.IndexedBatchJob, c podbuild.Spec) (took bool, err error) {
	pod := podbuild.New(job, c)
	r.jobs.expectCreate(job.UID, pod.Name, r.clock.Now())
	reason := "new"
	if c.Attempt > 0 {
		reason = "retry"
	}
	withSpec := podbuild.NeedsSpec(job)
	created, err := r.createPod(ctx, pod, withSpec)
	switch {
	case err == nil:
		if muts := podbuild.Mutations(pod, created, withSpec); len(muts) > 0 {
			podsCreated.WithLabelValues(reason, "mutated").Inc()
			err = &MutatedPodError{Pod: pod.Name, Mutations: muts}
			log.FromContext(ctx).Info("Created pod came back mutated by admission", "pod", klog.KObj(pod), "error", err)
			if derr := r.discardMutated(ctx, job, created); derr != nil {
				err = errors.Join(err, derr)
			}
			break
		}
		podsCreated.WithLabelValues(reason, "succeeded").Inc()
		log.FromContext(ctx).V(2).Info("Created pod", "pod", klog.KObj(pod), "index", c.Index, "attempt", c.Attempt)
		return true, nil
	case apierrors.IsAlreadyExists(err):
		if took, err = r.nameTakenByJob(ctx, job, c, pod); took {
			return true, nil
		}
	default:
		podsCreated.WithLabelValues(reason, "failed").Inc()
		err = fmt.Errorf("creating pod %s: %w", pod.Name, err)
	}
	r.jobs.createFailed(job.UID, pod.Name)
	return false, err
}

// isPodToCreate: the pod holding c's name is the one the job would create
// for c, by its labels, index and attempt.
func isPodToCreate(job *ibjv1.IndexedBatchJob, c podbuild.Spec, holder *metav1.PartialObjectMetadata) bool {
	ix, ok := jobpod.Index(&corev1.Pod{ObjectMeta: holder.ObjectMeta})
	return ok && ix == c.Index && jobpod.Count(holder.Annotations, ibjv1.AttemptAnnotation) == c.Attempt &&
		holder.Labels[ibjv1.JobNameLabel] == job.Name && holder.Labels[ibjv1.ControllerUIDLabel] == string(job.UID)
}

// nameTakenByJob is called when the create of pod found its name taken. The
// pod is the job's (took) when the pod of that name is controlled by the
// job and labelled as its pod. Otherwise the name belongs to another pod (one left by a deleted job
// of the same name, or anyone's): the job never counts it, the index's
// next attempt is numbered past it (takeName), and an event PodNameTaken
// says so. err is the error of reading the pod, nil otherwise.
func (r *Reconciler) nameTakenByJob(ctx context.Context, job *ibjv1.IndexedBatchJob, c podbuild.Spec, pod *corev1.Pod) (took bool, err error) {
	holder := &metav1.PartialObjectMetadata{}
	holder.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := r.apiReader.Get(ctx, client.ObjectKeyFromObject(pod), holder); err != nil {
		if apierrors.IsNotFound(err) {
			// Gone since: the next sync creates it.
			return false, nil
		}
		return false, fmt.Errorf("reading pod %s, whose name is taken: %w", pod.Name, err)
	}
	// A pod edited out of the job (strays.go), or to name another index,
	// may still be controlled by it until it is released or gone: the
	// job's own pod is the one it would create, its labels and index
	// unchanged.
	if ref := metav1.GetControllerOf(holder); ref != nil && ref.UID == job.UID && isPodToCreate(job, c, holder) {
		return true, nil
	}
	r.jobs.takeName(job.UID, c.Index, c.Attempt)
	r.emit(job, warningEvent("PodNameTaken", "Pod %s exists and is not controlled by this job: not counted; index %d starts under a new name",
		pod.Name, c.Index))
	return false, nil
}

// firstError is the first non-nil error, nil if there is none.
func firstError(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
