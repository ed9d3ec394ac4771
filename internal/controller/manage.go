package controller

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// runPods runs a job that has not reached its end: it suspends or resumes
// it, keeps at most one active pod per unfinished index and no more than
// parallelism, and starts pods for the indexes that need one (after their
// backoff). It leaves in the state the active, ready and terminating counts
// the status should show once the plan is applied.
func (s *syncState) runPods() {
	if isSuspended(s.job) {
		s.suspend()
		return
	}
	s.resume()
	s.keepOnePodPerIndex()
	if !s.expectationsSatisfied {
		// The cache has not seen all of this controller's own creates and
		// deletes: acting on it now could start a second pod for an index.
		return
	}
	if wait := s.failureBatchLeft(); wait > 0 {
		// A pod failed a moment ago: the failures that land with it decide
		// the job's end before any pod starts, as they would in one of
		// upstream's batched syncs, whatever event brought this sync.
		s.plan.requeue(wait)
		return
	}
	s.startPods()
}

// failureBatchLeft is how long the pods of the job wait after its latest
// failure, by the failed pods' end times (a terminating pod that counts as
// failed, under TerminatingOrFailed: by when it was deleted) and by when
// the cache saw the latest failure no sync counted yet: until
// podEventBatchPeriod after it, never longer (an end time from a kubelet
// whose clock is ahead). The time seen holds the batch where the failure
// reached the cache late: a failure of the same batch that ended a moment
// after it is on its way too.
func (s *syncState) failureBatchLeft() time.Duration {
	var latest time.Time
	for _, pod := range s.pods {
		at := pod.FinishedAt
		switch {
		case pod.Discarded, s.oldGeneration(pod):
			continue
		case pod.Terminating():
			if !s.classify(pod).Failed {
				continue
			}
			at = pod.DeletionTimestamp.Add(-time.Duration(ptr.Deref(pod.DeletionGracePeriodSeconds, 0)) * time.Second)
		case pod.Phase != corev1.PodFailed:
			continue
		}
		if at.After(latest) {
			latest = at
		}
	}
	if s.failureSeen.After(latest) {
		latest = s.failureSeen
	}
	if latest.IsZero() {
		return 0
	}
	return min(latest.Add(podEventBatchPeriod).Sub(s.now), podEventBatchPeriod)
}

// suspend deletes every active pod without counting it.
func (s *syncState) suspend() {
	for _, ix := range s.busy {
		st := s.indexes.get(ix)
		s.terminating += st.terminating
		for _, pod := range st.active {
			s.deleteUncounted(pod, "job suspended")
		}
	}
	if setSuspended(s.status, s.job.Generation, s.now) {
		s.plan.inform("Suspended", "Job suspended")
	}
}

// resume marks a suspended job resumed and makes sure it has a start time,
// from which its deadline runs.
func (s *syncState) resume() {
	if setResumed(s.status, s.job.Generation, s.now) {
		s.plan.inform("Resumed", "Job resumed")
	}
	if s.status.StartTime == nil {
		s.status.StartTime = &metav1.Time{Time: s.now}
	}
	if d := s.job.Spec.ActiveDeadlineSeconds; d != nil {
		s.plan.requeue(s.status.StartTime.Add(time.Duration(*d) * time.Second).Sub(s.now))
	}
}

// keepOnePodPerIndex removes active pods that were discarded, belong to a
// finished index or duplicate another pod of their index, then the highest
// indexes beyond parallelism.
func (s *syncState) keepOnePodPerIndex() {
	var keep []*jobpod.Pod
	for _, ix := range s.busy {
		st := s.indexes.get(ix)
		s.terminating += st.terminating
		for i, pod := range st.active {
			switch {
			case s.uncountedFailed.Has(pod.UID):
				// Recorded as failed while it ran: its failures in place
				// failed its index (jobpod.Failure.Stopped).
				s.deleteCounted(pod, "index failed in place")
			case pod.Discarded:
				s.deleteUncounted(pod, "pod was discarded")
			case s.indexFinished(ix):
				s.deleteUncounted(pod, "index already finished")
			case i > 0:
				s.deleteUncounted(pod, "duplicate pod for index")
				s.plan.warn("DuplicatePodIndex", "Deleted pod %s without counting it: pod %s already runs index %d", pod.Name, st.active[0].Name, ix)
			default:
				keep = append(keep, pod)
			}
		}
	}
	parallelism := int(ptr.Deref(s.job.Spec.Parallelism, 1))
	for len(keep) > parallelism {
		s.deleteUncounted(keep[len(keep)-1], "more active pods than parallelism")
		keep = keep[:len(keep)-1]
	}
	s.active = len(keep)
	for _, pod := range keep {
		if pod.Ready {
			s.ready++
		}
	}
}

// indexFinished: the index completed or failed for good.
func (s *syncState) indexFinished(ix int32) bool {
	return s.completed.Has(ix) || s.failedIndexes.Has(ix)
}

// maxCreatesPerSync bounds the pods one sync creates, as upstream's
// maxPodCreateDeletePerSync: a job with thousands of pods to start takes
// its turn with the others, and a small job created after it starts while
// it still has pods to create.
const maxCreatesPerSync = 500

// startPods creates pods for the lowest unfinished wanted indexes without
// one, within parallelism. Under podReplacementPolicy Failed terminating pods
// still take their slot.
func (s *syncState) startPods() {
	if s.unreadableIndexes {
		return
	}
	slots := int(ptr.Deref(s.job.Spec.Parallelism, 1)) - s.active
	if onlyReplaceFailed(s.job) {
		slots -= s.terminating
	}
	if slots <= 0 {
		return
	}
	if slots > maxCreatesPerSync {
		// The rest go in the next syncs, after other jobs' turns.
		slots = maxCreatesPerSync
		s.plan.requeue(time.Second)
	}
	if wait := s.createRefusedLeft(); wait > 0 {
		s.plan.requeue(wait)
		return
	}
	if !s.mutatedUntil.IsZero() && slots > 1 {
		// Within a minute of a create that came back mutated: one pod a
		// sync, the next after mutatedFloor (mutated.go).
		slots = 1
		s.plan.requeue(mutatedFloor(s.job))
	}
	if s.oldPodsLeft() > 0 {
		// A restart: the new generation starts once the old one is over.
		return
	}
	if s.gangHoldsPods() {
		// reportGang asks for the sync that tries again.
		return
	}
	if s.job.Spec.BackoffLimitPerIndex == nil {
		if wait := s.globalBackoffLeft(); wait > 0 {
			s.plan.requeue(wait)
			return
		}
	}
	// The unfinished indexes, lowest first: a large job's sync walks past
	// the indexes with a pod running, not past every finished one.
	s.wanted.Difference(s.completed).Difference(s.failedIndexes).Each(func(ix int32) bool {
		if next, ok := s.nextPod(ix); ok {
			next.Generation = s.status.Restarts
			s.plan.create = append(s.plan.create, next)
			s.reportRaisedMemory(next)
			slots--
			s.active++
		}
		return slots > 0
	})
}

// nextPod is the pod to create for an unfinished index, or false while the
// index has a pod that is active (or terminating, under
// podReplacementPolicy Failed) or waits for its per-index backoff.
func (s *syncState) nextPod(ix int32) (podbuild.Spec, bool) {
	st := s.indexes.get(ix)
	if st == nil {
		return podbuild.Spec{Index: ix, Attempt: s.nameFloors[ix], Avoid: s.avoidFor(ix)}, true
	}
	if len(st.active) > 0 || (onlyReplaceFailed(s.job) && st.terminating > 0) {
		return podbuild.Spec{}, false
	}
	next := s.nextAttempt(st.latest)
	if f := s.failureOf(st.latest); s.job.Spec.BackoffLimitPerIndex != nil && f.Failed && !s.oldGeneration(st.latest) {
		if wait := s.backoff.IndexRetryAt(st.latest, f).Sub(s.now); wait > 0 {
			s.plan.requeue(wait)
			return podbuild.Spec{}, false
		}
	}
	return next, true
}

// nextAttempt numbers the index's next pod and carries its failure counts
// and OOM kills forward from the latest pod's annotations, so that they
// survive restarts the way upstream's job-index-failure-count annotation
// does. The first pod of a new generation (a RestartJob restart) starts
// its index's failure counts afresh, as a restarted JobSet's Jobs do: the
// attempt numbers go on.
func (s *syncState) nextAttempt(last *jobpod.Pod) podbuild.Spec {
	f := s.failureOf(last)
	failures, ignored := jobpod.NextCounts(last, f)
	if s.oldGeneration(last) {
		failures, ignored = 0, 0
	}
	attempt := max(last.Attempt+1, s.nameFloors[last.Index])
	if !s.oldGeneration(last) {
		s.noteFailure(last, f)
	}
	return podbuild.Spec{Index: last.Index, Attempt: attempt, Failures: failures, Ignored: ignored,
		OOMKills: jobpod.NextOOMKills(s.job, last, f), MemoryCap: s.memoryCap, Avoid: s.avoidFor(last.Index)}
}

// reportRaisedMemory says, for the paced events, that a pod is created
// with more memory than the template's after OOM kills of its index, and
// that its queue held part of the raise back.
func (s *syncState) reportRaisedMemory(next podbuild.Spec) {
	if next.OOMKills == 0 {
		return
	}
	spec := s.job.Spec.Template.Spec.DeepCopy()
	m := raiseMemory(s.job, spec, next.OOMKills, next.MemoryCap)
	name := podName(s.job, next.Index, next.Attempt)
	if m.raised {
		msg := fmt.Sprintf("Pod %s of index %d gets memory %s (OOM kills of the index: %d)", name, next.Index, memoryRecord(spec), next.OOMKills)
		if m.capped {
			msg += fmt.Sprintf("; capped at %s, the container maximum of LimitRange %s", next.MemoryCap.Max.String(), next.MemoryCap.LimitRange)
		}
		s.plan.memoryRaised = append(s.plan.memoryRaised, raisedPod{pod: name, message: msg})
	}
	if len(m.heldBack) > 0 {
		s.plan.memoryHeldBack = append(s.plan.memoryHeldBack, fmt.Sprintf("Kept the memory requests of containers %s of pod %s (index %d) "+
			"at the template's, which is what Kueue admitted; only their limits were raised", strings.Join(m.heldBack, ","), name, next.Index))
	}
}

// globalBackoffLeft is the replacement delay of a job without per-index
// backoff: it grows with the failures since the last success and runs from
// the latest failure, as upstream's backoff record, deleted pods that are
// gone included (s.gone).
func (s *syncState) globalBackoffLeft() time.Duration {
	var ends jobpod.JobEnds
	for _, pod := range s.grouped {
		switch {
		case s.oldGeneration(pod):
		case pod.Phase == corev1.PodSucceeded:
			ends.Add(pod, jobpod.Failure{}) // a success: nothing to classify
		default:
			ends.Add(pod, s.classify(pod))
		}
	}
	for _, pod := range s.gone {
		ends.AddFailure(pod.finishedAt, pod.failure())
	}
	ends.AddSuccess(s.settledSuccess)
	at := ends.RetryAt(s.backoff)
	if at.IsZero() {
		return 0
	}
	return at.Sub(s.now)
}

// createRefusedLeft is how long a job still waits before it creates pods
// again: after a create came back mutated by admission (mutatedUntil), or,
// for a job with retryBackoff.createRefusedDelaySeconds, after the API
// server refused one; zero otherwise.
func (s *syncState) createRefusedLeft() time.Duration {
	if left := s.mutatedUntil.Sub(s.now); !s.mutatedUntil.IsZero() && left > 0 {
		return left
	}
	d := jobpod.CreateRefusedDelay(s.job)
	if d == 0 || s.lastCreateRefused.IsZero() {
		return 0
	}
	return s.lastCreateRefused.Add(d).Sub(s.now)
}
