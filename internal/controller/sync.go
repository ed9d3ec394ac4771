package controller

import (
	"fmt"
	"math"
	"sort"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// defaultBackoffLimit is batch/v1's default when backoffLimitPerIndex is unset.
const defaultBackoffLimit = 6

// event is a Kubernetes event the reconciler emits once the status is written.
type event struct {
	warning bool
	reason  string
	message string
}

// podDeletion is a pod to delete. stripFinalizer removes the tracking
// finalizer first, so the pod's end is never counted (suspend, excess pods,
// lingering pods after success, pods with an invalid index).
type podDeletion struct {
	pod            *cachedPod
	stripFinalizer bool
	reason         string
}

// finishedPod is a pod whose result this sync records, for metrics.
type finishedPod struct {
	index     int32
	succeeded bool
}

// plan is everything one sync decided. The reconciler applies it in order:
// deletes and creates, then the status (if changed), then finalizer removals
// (only once the status holding their result is written), then events.
type plan struct {
	status          ibjv1.IndexedBatchJobStatus
	create          []podToCreate
	delete          []podDeletion
	removeFinalizer []*cachedPod
	// discard are pods whose finalizer goes without their end being counted.
	discard  []*cachedPod
	events   []event
	recorded []finishedPod
	// newlyFinished is the terminal condition reached in this sync, if any.
	newlyFinished *metav1.Condition
	// newlyCompleted and newlyFailedIndexes are how many indexes this sync
	// added to completedIndexes and failedIndexes, for metrics.
	newlyCompleted, newlyFailedIndexes int
	deleteJob                          bool
	requeueAfter                       time.Duration
}

func (p *plan) requeue(d time.Duration) {
	if d <= 0 {
		d = time.Second
	}
	if p.requeueAfter == 0 || d < p.requeueAfter {
		p.requeueAfter = d
	}
}

// syncInput is what the decision core sees: the job, its pods from the cache
// (owned by the job), the time, and whether the cache has caught up with this
// controller's own creates and deletes.
type syncInput struct {
	job                   *ibjv1.IndexedBatchJob
	pods                  []*cachedPod
	now                   time.Time
	backoff               Backoff
	expectationsSatisfied bool
}

// indexState is what the pods say about one completion index.
type indexState struct {
	pods        []*cachedPod // sorted by attempt
	active      []*cachedPod
	terminating int
	// latest is the pod with the highest attempt; the next pod's attempt
	// number and failure counts follow from it.
	latest *cachedPod
}

// syncJob is the pure decision core: from the job, its pods and the time it
// computes the new status and the actions that lead there. It makes no API
// call and reads no clock; every decision of the controller is here.
func syncJob(in syncInput) plan {
	job := in.job
	p := plan{status: *job.Status.DeepCopy()}
	st := &p.status
	st.ObservedGeneration = job.Generation

	if IsFinished(job) {
		syncFinished(in, &p)
		return p
	}

	completions := job.Spec.Completions
	perIndex := job.Spec.BackoffLimitPerIndex != nil
	onlyFailed := onlyReplaceFailed(job)

	// Durable records from the last status: what was counted, what is
	// recorded but still waiting for its finalizer to go.
	uSucc, uFail := sets.New[types.UID](), sets.New[types.UID]()
	if u := st.UncountedTerminatedPods; u != nil {
		uSucc, uFail = uidSet(u.Succeeded), uidSet(u.Failed)
	}
	completed, err := indexset.Parse(st.CompletedIndexes, completions)
	if err != nil {
		p.events = append(p.events, event{warning: true, reason: "InvalidStatus",
			message: fmt.Sprintf("Ignored unreadable status.completedIndexes %q: %v; rebuilt it from the pods", st.CompletedIndexes, err)})
		completed = indexset.Set{}
	}
	rebuildCompleted, rebuildFailed := err != nil, false
	failedIdx := indexset.Set{}
	if perIndex && st.FailedIndexes != nil {
		if failedIdx, err = indexset.Parse(*st.FailedIndexes, completions); err != nil {
			p.events = append(p.events, event{warning: true, reason: "InvalidStatus",
				message: fmt.Sprintf("Ignored unreadable status.failedIndexes %q: %v; rebuilt it from the pods", *st.FailedIndexes, err)})
			failedIdx = indexset.Set{}
			rebuildFailed = true
		}
	}

	completedBefore, failedBefore := completed.Len(), failedIdx.Len()

	// Flush: a recorded pod whose finalizer is gone (or the pod with it) is
	// moved into the counters. The cache never forgets a pod it saw except
	// through its deletion, so "absent" means deleted, never "not seen yet".
	byUID := make(map[types.UID]*cachedPod, len(in.pods))
	for _, pod := range in.pods {
		byUID[pod.UID] = pod
	}
	for _, uid := range sets.List(uSucc) {
		if pod := byUID[uid]; pod == nil || !hasTrackingFinalizer(pod) {
			uSucc.Delete(uid)
			st.Succeeded++
		}
	}
	for _, uid := range sets.List(uFail) {
		if pod := byUID[uid]; pod == nil || !hasTrackingFinalizer(pod) {
			uFail.Delete(uid)
			st.Failed++
		}
	}

	// Group pods by index; pods without a valid index are removed. Until
	// they are gone they count as terminating, as every pod of the job does.
	indexes := map[int32]*indexState{}
	strays := 0
	for _, pod := range in.pods {
		ix, ok := pod.index, pod.indexOK
		if !ok || ix >= completions {
			if pod.DeletionTimestamp == nil || hasTrackingFinalizer(pod) {
				p.delete = append(p.delete, podDeletion{pod: pod, stripFinalizer: true, reason: "invalid completion index"})
			}
			if pod.DeletionTimestamp == nil {
				p.events = append(p.events, event{warning: true, reason: "InvalidPodIndex", message: fmt.Sprintf(
					"Deleted pod %s without counting it: its completion index %q is not in 0..%d",
					pod.Name, pod.badIndex, completions-1)})
			}
			if !isFinished(pod) {
				strays++
			}
			continue
		}
		s := indexes[ix]
		if s == nil {
			s = &indexState{}
			indexes[ix] = s
		}
		s.pods = append(s.pods, pod)
		if s.latest == nil || pod.attempt > s.latest.attempt {
			s.latest = pod
		}
		switch {
		case isActive(pod):
			s.active = append(s.active, pod)
		case isTerminating(pod):
			s.terminating++
		}
	}
	if rebuildCompleted || rebuildFailed {
		completed, failedIdx = rebuildIndexSets(job, indexes, completed, failedIdx, rebuildCompleted, rebuildFailed)
	}
	order := make([]int32, 0, len(indexes))
	for ix, s := range indexes {
		order = append(order, ix)
		sort.Slice(s.pods, func(a, b int) bool { return s.pods[a].attempt < s.pods[b].attempt })
	}
	sort.Slice(order, func(a, b int) bool { return order[a] < order[b] })

	// Record newly finished pods. A pod is recorded once, in the same status
	// write as the index sets it changes; its finalizer goes only after that.
	var failJob *failureVerdict
	var ignoredFailures []*cachedPod
	for _, ix := range order {
		for _, pod := range indexes[ix].pods {
			if !hasTrackingFinalizer(pod) || uSucc.Has(pod.UID) || uFail.Has(pod.UID) {
				continue
			}
			switch {
			case pod.phase == corev1.PodSucceeded:
				uSucc.Insert(pod.UID)
				if !failedIdx.Has(ix) {
					completed = completed.Add(ix)
				}
				p.recorded = append(p.recorded, finishedPod{index: ix, succeeded: true})
			case countsAsFailed(pod, onlyFailed):
				v := matchFailurePolicy(job.Spec.PodFailurePolicy, pod)
				if v.action == batchv1.PodFailurePolicyActionIgnore {
					ignoredFailures = append(ignoredFailures, pod)
					continue
				}
				uFail.Insert(pod.UID)
				p.recorded = append(p.recorded, finishedPod{index: ix})
				switch v.action {
				case batchv1.PodFailurePolicyActionFailJob:
					if failJob == nil {
						failJob = &v
					}
				case batchv1.PodFailurePolicyActionFailIndex:
					if perIndex && !completed.Has(ix) {
						failedIdx = failedIdx.Add(ix)
					}
				default:
					if perIndex && !completed.Has(ix) && pod.failures+1 > *job.Spec.BackoffLimitPerIndex {
						failedIdx = failedIdx.Add(ix)
					}
				}
			}
		}
	}

	// As upstream, a job that is not suspended has started, whatever this
	// sync decides: a job that finishes in the sync that starts or resumes
	// it (completions 0, a failure seen on resume) still gets a startTime.
	if st.StartTime == nil && !ptr.Deref(job.Spec.Suspend, false) {
		st.StartTime = &metav1.Time{Time: in.now}
	}

	// Decide whether the job reached its end, in upstream's order.
	target := currentTarget(st)
	if target == nil {
		target = newTarget(in, failJob, st.Failed+int32(uFail.Len()), indexes, completed, failedIdx)
		if target != nil {
			setCondition(st, job.Generation, in.now, target.Type, metav1.ConditionTrue, target.Reason, target.Message)
		}
	}

	active, ready, terminating := 0, 0, 0
	if target != nil {
		failing := target.Type == ibjv1.ConditionFailureTarget
		for _, ix := range order {
			s := indexes[ix]
			terminating += s.terminating
			for _, pod := range s.pods {
				if isFinished(pod) {
					continue // recorded above, or ignored
				}
				switch {
				case failing:
					// As upstream: once the job fails, every pod that has
					// not finished counts as failed.
					if hasTrackingFinalizer(pod) && !uFail.Has(pod.UID) {
						uFail.Insert(pod.UID)
						p.recorded = append(p.recorded, finishedPod{index: ix})
					}
					if pod.DeletionTimestamp == nil {
						p.delete = append(p.delete, podDeletion{pod: pod, reason: target.Reason})
						terminating++
					}
				case pod.DeletionTimestamp == nil:
					// Lingering pods of a successful job are not failures.
					p.delete = append(p.delete, podDeletion{pod: pod, stripFinalizer: true, reason: target.Reason})
					terminating++
				case hasTrackingFinalizer(pod):
					p.discard = append(p.discard, pod)
				}
			}
		}
	} else {
		active, ready, terminating = manage(in, &p, indexes, order, completed, failedIdx, uFail)
	}

	// Everything recorded keeps its finalizer until the status is written.
	held := heldForRetry(job, target, indexes, completed, failedIdx, uFail)
	for _, pod := range in.pods {
		if hasTrackingFinalizer(pod) && (uSucc.Has(pod.UID) || uFail.Has(pod.UID)) && !held.Has(pod.UID) {
			p.removeFinalizer = append(p.removeFinalizer, pod)
		}
	}
	for _, pod := range ignoredFailures {
		if !held.Has(pod.UID) {
			p.removeFinalizer = append(p.removeFinalizer, pod)
		}
	}

	terminating += strays

	// The second phase: Complete or Failed once nothing is left running or
	// terminating, every finished pod is counted, and the cache is current.
	if target != nil && terminating == 0 && uSucc.Len() == 0 && uFail.Len() == 0 && in.expectationsSatisfied {
		final := ibjv1.ConditionFailed
		if target.Type == ibjv1.ConditionSuccessCriteriaMet {
			final = ibjv1.ConditionComplete
			st.CompletionTime = &metav1.Time{Time: in.now}
		}
		setCondition(st, job.Generation, in.now, final, metav1.ConditionTrue, target.Reason, target.Message)
		p.newlyFinished = meta.FindStatusCondition(st.Conditions, final)
		p.events = append(p.events, event{warning: final == ibjv1.ConditionFailed, reason: finishedEventReason(final, target.Reason), message: target.Message})
		if job.Spec.TTLSecondsAfterFinished != nil {
			p.requeue(time.Duration(*job.Spec.TTLSecondsAfterFinished) * time.Second)
		}
	}

	st.Active = int32(active)
	st.Ready = ptr.To(int32(ready))
	st.Terminating = ptr.To(int32(terminating))
	p.newlyCompleted = max(completed.Len()-completedBefore, 0)
	p.newlyFailedIndexes = max(failedIdx.Len()-failedBefore, 0)
	st.CompletedIndexes = completed.String()
	if perIndex {
		st.FailedIndexes = ptr.To(failedIdx.String())
	} else {
		st.FailedIndexes = nil
	}
	st.UncountedTerminatedPods = uncountedOf(uSucc, uFail)
	st.Phase = phaseOf(st)
	return p
}

// heldForRetry are the failed pods whose tracking finalizer stays although
// their result is recorded: with backoffLimitPerIndex, the latest pod of an
// index still to be retried carries the index's failure counts and the time
// its backoff runs from. A deleted pod (evicted, or removed by a user) goes
// from the API server as soon as its finalizer does; without it the next
// pod of the index would start at attempt 0 with no failures and no delay.
// The finalizer goes once the replacement exists (it is then the latest),
// the index finished, or the job reached its end, as upstream's
// podsWithDelayedDeletionPerIndex.
func heldForRetry(job *ibjv1.IndexedBatchJob, target *metav1.Condition, indexes map[int32]*indexState, completed, failedIdx indexset.Set, recordedFailed sets.Set[types.UID]) sets.Set[types.UID] {
	held := sets.New[types.UID]()
	if job.Spec.BackoffLimitPerIndex == nil || target != nil {
		return held
	}
	onlyFailed := onlyReplaceFailed(job)
	for ix, s := range indexes {
		if last := s.latest; !completed.Has(ix) && !failedIdx.Has(ix) && endedInFailure(last, onlyFailed, recordedFailed) {
			held.Insert(last.UID)
		}
	}
	return held
}

func finishedEventReason(final, reason string) string {
	if final == ibjv1.ConditionComplete {
		return "Completed"
	}
	return reason
}

// onlyReplaceFailed: with podReplacementPolicy Failed (the default when a
// podFailurePolicy is set) a pod is replaced only once it reached phase
// Failed, never while it is terminating.
func onlyReplaceFailed(job *ibjv1.IndexedBatchJob) bool {
	if job.Spec.PodReplacementPolicy != nil {
		return *job.Spec.PodReplacementPolicy == batchv1.Failed
	}
	return job.Spec.PodFailurePolicy != nil
}

// countsAsFailed mirrors upstream's isPodFailed: phase Failed, or, when
// terminating pods are replaced at once, a pod deleted before it succeeded
// (it may never get the chance to reach phase Failed).
func countsAsFailed(pod *cachedPod, onlyFailed bool) bool {
	if isDiscarded(pod) {
		return false
	}
	if pod.phase == corev1.PodFailed {
		return true
	}
	return !onlyFailed && pod.DeletionTimestamp != nil && pod.phase != corev1.PodSucceeded
}

// currentTarget is the FailureTarget or SuccessCriteriaMet condition already
// set: once set, the job's end is decided and never revisited.
func currentTarget(st *ibjv1.IndexedBatchJobStatus) *metav1.Condition {
	for _, typ := range []string{ibjv1.ConditionFailureTarget, ibjv1.ConditionSuccessCriteriaMet} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c != nil && c.Status == metav1.ConditionTrue {
			return c
		}
	}
	return nil
}

// newTarget checks the end conditions in upstream's order: a FailJob rule,
// the backoff limit, the maximal number of failed indexes, the deadline,
// the success policy, all indexes completed, all indexes finished with some
// failed.
func newTarget(in syncInput, failJob *failureVerdict, failed int32, indexes map[int32]*indexState, completed, failedIdx indexset.Set) *metav1.Condition {
	job := in.job
	fail := func(reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: ibjv1.ConditionFailureTarget, Reason: reason, Message: msg}
	}
	if failJob != nil {
		return fail(ibjv1.ReasonPodFailurePolicy, failJob.message)
	}
	if exceedsBackoffLimit(job, failed, indexes) {
		return fail(ibjv1.ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	}
	if job.Spec.BackoffLimitPerIndex != nil && job.Spec.MaxFailedIndexes != nil && failedIdx.Len() > int(*job.Spec.MaxFailedIndexes) {
		return fail(ibjv1.ReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes")
	}
	if d := deadlineLeft(job, in.now); d != nil && *d <= 0 {
		return fail(ibjv1.ReasonDeadlineExceeded, "Job was active longer than specified deadline")
	}
	if matchSuccessPolicy(job.Spec.SuccessPolicy, job.Spec.Completions, completed) {
		return &metav1.Condition{Type: ibjv1.ConditionSuccessCriteriaMet, Reason: ibjv1.ReasonSuccessPolicy, Message: "Matched rules of the success policy"}
	}
	if completed.Len() >= int(job.Spec.Completions) {
		return &metav1.Condition{Type: ibjv1.ConditionSuccessCriteriaMet, Reason: ibjv1.ReasonCompletionsReached, Message: "Reached expected number of succeeded pods"}
	}
	if failedIdx.Len() > 0 && completed.Len()+failedIdx.Len() >= int(job.Spec.Completions) {
		return fail(ibjv1.ReasonFailedIndexes, "Job has failed indexes")
	}
	return nil
}

// exceedsBackoffLimit: more failed pods than backoffLimit, or, with
// restartPolicy OnFailure, as many container restarts in running pods
// (upstream's pastBackoffLimitOnFailure).
func exceedsBackoffLimit(job *ibjv1.IndexedBatchJob, failed int32, indexes map[int32]*indexState) bool {
	limit := int32(defaultBackoffLimit)
	if job.Spec.BackoffLimit != nil {
		limit = *job.Spec.BackoffLimit
	} else if job.Spec.BackoffLimitPerIndex != nil {
		limit = math.MaxInt32
	}
	if failed > limit {
		return true
	}
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || limit == math.MaxInt32 {
		return false
	}
	var restarts int32
	for _, s := range indexes {
		for _, pod := range s.active {
			restarts += pod.restarts
		}
	}
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}

// deadlineLeft is the time until activeDeadlineSeconds passes, nil without
// a deadline or before the job started.
func deadlineLeft(job *ibjv1.IndexedBatchJob, now time.Time) *time.Duration {
	if job.Spec.ActiveDeadlineSeconds == nil || job.Status.StartTime == nil {
		return nil
	}
	d := job.Status.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second).Sub(now)
	return &d
}

// manage runs a job that has not reached its end: suspend and resume, the
// pods to create (within parallelism, after backoff, never a second pod for
// an index) and the pods to remove. It returns the active, ready and
// terminating counts the status should show once the plan is applied.
func manage(in syncInput, p *plan, indexes map[int32]*indexState, order []int32, completed, failedIdx indexset.Set, recordedFailed sets.Set[types.UID]) (active, ready, terminating int) {
	job := in.job
	st := &p.status
	remove := func(pod *cachedPod, reason string) {
		p.delete = append(p.delete, podDeletion{pod: pod, stripFinalizer: true, reason: reason})
		terminating++
	}

	if ptr.Deref(job.Spec.Suspend, false) {
		for _, ix := range order {
			s := indexes[ix]
			terminating += s.terminating
			for _, pod := range s.active {
				remove(pod, "job suspended")
			}
		}
		if setCondition(st, job.Generation, in.now, ibjv1.ConditionSuspended, metav1.ConditionTrue, ibjv1.ReasonJobSuspended, "Job suspended") {
			p.events = append(p.events, event{reason: "Suspended", message: "Job suspended"})
		}
		// The deadline does not run while suspended, and a suspended job
		// that never started may have its scheduling directives changed.
		st.StartTime = nil
		return 0, 0, terminating
	}

	if c := meta.FindStatusCondition(st.Conditions, ibjv1.ConditionSuspended); c != nil && c.Status == metav1.ConditionTrue {
		setCondition(st, job.Generation, in.now, ibjv1.ConditionSuspended, metav1.ConditionFalse, ibjv1.ReasonJobResumed, "Job resumed")
		p.events = append(p.events, event{reason: "Resumed", message: "Job resumed"})
		st.StartTime = nil
	}
	if st.StartTime == nil {
		st.StartTime = &metav1.Time{Time: in.now}
	}
	if job.Spec.ActiveDeadlineSeconds != nil {
		p.requeue(st.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second).Sub(in.now))
	}

	parallelism := int(ptr.Deref(job.Spec.Parallelism, 1))
	onlyFailed := onlyReplaceFailed(job)

	// Keep at most one active pod per index, none for finished indexes, and
	// no more than parallelism in all (the highest indexes go first).
	var keep []*cachedPod
	for _, ix := range order {
		s := indexes[ix]
		terminating += s.terminating
		for i, pod := range s.active {
			switch {
			case isDiscarded(pod):
				remove(pod, "pod was discarded")
			case completed.Has(ix) || failedIdx.Has(ix):
				remove(pod, "index already finished")
			case i > 0:
				remove(pod, "duplicate pod for index")
				p.events = append(p.events, event{warning: true, reason: "DuplicatePodIndex", message: fmt.Sprintf(
					"Deleted pod %s without counting it: pod %s already runs index %d", pod.Name, s.active[0].Name, ix)})
			default:
				keep = append(keep, pod)
			}
		}
	}
	for len(keep) > parallelism {
		remove(keep[len(keep)-1], "more active pods than parallelism")
		keep = keep[:len(keep)-1]
	}
	active = len(keep)
	for _, pod := range keep {
		if pod.ready {
			ready++
		}
	}

	if !in.expectationsSatisfied {
		// The cache has not seen all of this controller's own creates and
		// deletes: acting on it now could start a second pod for an index.
		return active, ready, terminating
	}
	slots := parallelism - active
	if onlyFailed {
		slots -= terminating
	}
	if slots <= 0 {
		return active, ready, terminating
	}

	perIndex := job.Spec.BackoffLimitPerIndex != nil
	var globalWait time.Duration
	if !perIndex {
		globalWait = globalBackoffLeft(in, indexes)
		if globalWait > 0 {
			p.requeue(globalWait)
			return active, ready, terminating
		}
	}
	for ix := int32(0); ix < job.Spec.Completions && slots > 0; ix++ {
		if completed.Has(ix) || failedIdx.Has(ix) {
			continue
		}
		s := indexes[ix]
		next := podToCreate{index: ix}
		if s != nil {
			if len(s.active) > 0 || (onlyFailed && s.terminating > 0) {
				continue
			}
			next = nextAttempt(job, s, onlyFailed, recordedFailed)
			if perIndex && s.latest != nil && endedInFailure(s.latest, onlyFailed, recordedFailed) {
				wait := s.latest.finishedAt.Add(in.backoff.Delay(next.failures + next.ignored)).Sub(in.now)
				if wait > 0 {
					p.requeue(wait)
					continue
				}
			}
		}
		p.create = append(p.create, next)
		slots--
		active++
	}
	return active, ready, terminating
}

// nextAttempt numbers the index's next pod and carries its failure counts
// forward from the latest pod's annotations, so that they survive restarts
// the way upstream's job-index-failure-count annotation does.
func nextAttempt(job *ibjv1.IndexedBatchJob, s *indexState, onlyFailed bool, recordedFailed sets.Set[types.UID]) podToCreate {
	next := podToCreate{}
	if s.latest == nil {
		return next
	}
	last := s.latest
	next.index = last.index
	next.attempt = last.attempt + 1
	next.failures = last.failures
	next.ignored = last.ignored
	switch {
	case recordedFailed.Has(last.UID):
		next.failures++
	case countsAsFailed(last, onlyFailed):
		if matchFailurePolicy(job.Spec.PodFailurePolicy, last).action == batchv1.PodFailurePolicyActionIgnore {
			next.ignored++
		} else {
			next.failures++
		}
	}
	return next
}

// endedInFailure: the pod failed, or was recorded as failed. A pod deleted
// under TerminatingOrFailed is recorded as failed at once and may still exit
// 0 afterwards; its index has lost that attempt all the same.
func endedInFailure(pod *cachedPod, onlyFailed bool, recordedFailed sets.Set[types.UID]) bool {
	return recordedFailed.Has(pod.UID) || countsAsFailed(pod, onlyFailed)
}

// globalBackoffLeft is the replacement delay of a job without per-index
// backoff: it grows with the failures since the last success and runs from
// the latest failure, as upstream's backoff record.
func globalBackoffLeft(in syncInput, indexes map[int32]*indexState) time.Duration {
	type end struct {
		at     time.Time
		failed bool
	}
	onlyFailed := onlyReplaceFailed(in.job)
	var ends []end
	for _, s := range indexes {
		for _, pod := range s.pods {
			switch {
			case pod.phase == corev1.PodSucceeded:
				ends = append(ends, end{at: pod.finishedAt})
			case countsAsFailed(pod, onlyFailed):
				ends = append(ends, end{at: pod.finishedAt, failed: true})
			}
		}
	}
	sort.Slice(ends, func(a, b int) bool { return ends[a].at.Before(ends[b].at) })
	var failures int32
	var last time.Time
	for _, e := range ends {
		if e.failed {
			failures++
			last = e.at
		} else {
			failures = 0
		}
	}
	if failures == 0 {
		return 0
	}
	return last.Add(in.backoff.Delay(failures)).Sub(in.now)
}

// syncFinished handles a job that is Complete or Failed: it lets go of any
// pod still held by a tracking finalizer, removes pods still running, and
// deletes the job once ttlSecondsAfterFinished passed.
func syncFinished(in syncInput, p *plan) {
	for _, pod := range in.pods {
		switch {
		case isActive(pod):
			p.delete = append(p.delete, podDeletion{pod: pod, stripFinalizer: true, reason: "job finished"})
		case hasTrackingFinalizer(pod):
			p.removeFinalizer = append(p.removeFinalizer, pod)
		}
	}
	ttl := in.job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return
	}
	at, ok := finishedAt(in.job)
	if !ok {
		return
	}
	if left := at.Add(time.Duration(*ttl) * time.Second).Sub(in.now); left > 0 {
		p.requeue(left)
		return
	}
	p.deleteJob = true
}

// rebuildIndexSets recovers completedIndexes and failedIndexes from the
// pods when the status holding them cannot be read (someone wrote it by
// hand): an index is completed if one of its pods succeeded, failed if its
// latest pod's failure went over backoffLimitPerIndex or matched FailIndex.
func rebuildIndexSets(job *ibjv1.IndexedBatchJob, indexes map[int32]*indexState, completed, failedIdx indexset.Set, doCompleted, doFailed bool) (indexset.Set, indexset.Set) {
	if doCompleted {
		for ix, s := range indexes {
			for _, pod := range s.pods {
				if pod.phase == corev1.PodSucceeded {
					completed = completed.Add(ix)
				}
			}
		}
	}
	if doFailed && job.Spec.BackoffLimitPerIndex != nil {
		onlyFailed := onlyReplaceFailed(job)
		for ix, s := range indexes {
			last := s.latest
			if completed.Has(ix) || !countsAsFailed(last, onlyFailed) {
				continue
			}
			action := matchFailurePolicy(job.Spec.PodFailurePolicy, last).action
			if action == batchv1.PodFailurePolicyActionFailIndex ||
				(action != batchv1.PodFailurePolicyActionIgnore && last.failures+1 > *job.Spec.BackoffLimitPerIndex) {
				failedIdx = failedIdx.Add(ix)
			}
		}
	}
	return completed, failedIdx
}
