package controller

import (
	"cmp"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// maxUncountedPods bounds status.uncountedTerminatedPods, as upstream's
// MaxUncountedPods: a sync records no more failed pods once the list is
// this long; the rest are recorded once these are counted.
const maxUncountedPods = 500

// readRecordedResults reads what earlier syncs recorded: the uncounted pods
// and the index sets, without the indexes the job no longer runs (an
// elastic job scaled down). An index set that cannot be read (someone wrote
// the status by hand) is reported and rebuilt from the pods.
func (s *syncState) readRecordedResults() {
	// Succeeded UIDs (and those of ignored failures after failures in
	// place, recordFinishedPods) are dropped once their pods are released
	// (countReleasedPods); so are those of versions that recorded every
	// succeeded pod, whose indexes were recorded in the same write.
	s.uncountedFailed, s.uncountedSucceeded = sets.New[types.UID](), sets.New[types.UID]()
	if u := s.status.UncountedTerminatedPods; u != nil {
		s.uncountedFailed, s.uncountedSucceeded = sets.New(u.Failed...), sets.New(u.Succeeded...)
	}
	var err error
	if s.completed, err = indexset.Parse(s.status.CompletedIndexes, 0); err != nil {
		s.plan.warn("InvalidStatus", "Ignored unreadable status.completedIndexes %q: %v; rebuilt it from the pods", s.status.CompletedIndexes, err)
		s.completed, s.rebuildCompleted = indexset.Set{}, true
	}
	if s.job.Spec.BackoffLimitPerIndex != nil && s.status.FailedIndexes != nil {
		if s.failedIndexes, err = indexset.Parse(*s.status.FailedIndexes, 0); err != nil {
			s.plan.warn("InvalidStatus", "Ignored unreadable status.failedIndexes %q: %v; rebuilt it from the pods", *s.status.FailedIndexes, err)
			s.failedIndexes, s.rebuildFailed = indexset.Set{}, true
		}
	}
	s.completed, s.failedIndexes = s.completed.Intersect(s.wanted), s.failedIndexes.Intersect(s.wanted)
	s.completedBefore, s.failedBefore = s.completed.Len(), s.failedIndexes.Len()
}

// countReleasedPods moves a recorded failed pod whose finalizer is gone (or
// the pod with it) into status.failed, and forgets a recorded succeeded one
// (its index and its failures in place are counted already). The cache
// never forgets a pod it saw except through its deletion, so "absent"
// means deleted, never "not seen yet".
func (s *syncState) countReleasedPods() {
	if s.uncountedFailed.Len() == 0 && s.uncountedSucceeded.Len() == 0 {
		return
	}
	// The recorded pods are at most maxUncountedPods, the pods all of the
	// job's: each pod is looked up among the recorded ones.
	held := sets.New[types.UID]()
	for _, pod := range s.pods {
		if pod.Tracked && s.recorded(pod) {
			held.Insert(pod.UID)
		}
	}
	for _, uid := range sets.List(s.uncountedFailed) {
		if !held.Has(uid) {
			s.uncountedFailed.Delete(uid)
			s.status.Failed++
		}
	}
	for _, uid := range sets.List(s.uncountedSucceeded) {
		if !held.Has(uid) {
			s.uncountedSucceeded.Delete(uid)
		}
	}
}

// rebuildUnreadableIndexSets recovers an index set the status could not
// give: an index is completed if one of its pods succeeded, failed if its
// latest pod failed it (classifyFailure's FailsIndex, the same decision
// recordFinishedPods makes).
func (s *syncState) rebuildUnreadableIndexSets() {
	s.indexes.each(func(ix int32, st *indexState) {
		if s.rebuildCompleted && hasSucceededPod(st) {
			s.completed = s.completed.Add(ix)
		}
	})
	if !s.rebuildFailed {
		return
	}
	s.indexes.each(func(ix int32, st *indexState) {
		if !s.completed.Has(ix) && s.classify(st.latest).FailsIndex {
			s.failedIndexes = s.failedIndexes.Add(ix)
		}
	})
}

func hasSucceededPod(st *indexState) bool {
	for _, pod := range st.pods {
		if pod.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}

// recordFinishedPods records the pods that finished since the last status:
// a succeeded pod by adding its index to the completed ones, a failed one by
// its UID in uncountedTerminatedPods (at most maxUncountedPods of them). A
// pod's finalizer goes only once the status that records it is written.
// The failures a pod had in place go into status.failed in the write that
// records its UID (a succeeded pod's too, then), so that the UID says they
// are counted; a Stopped pod, whose in-place failures failed its index, is
// recorded while it still runs.
func (s *syncState) recordFinishedPods() {
	// Only a tracked pod not recorded yet has an end to record: the running
	// pods and those finished since the last status, however many pods the
	// job has. A success whose index is finished already is recorded (or
	// comes too late): its finalizer may go long after, when the client has
	// time (releaseFinalizers). They are taken by index, then attempt.
	var todo []*jobpod.Pod
	for _, pod := range s.grouped {
		if pod.Tracked && !s.recorded(pod) && !s.oldGeneration(pod) &&
			(pod.Phase != corev1.PodSucceeded || !s.indexFinished(pod.Index)) {
			todo = append(todo, pod)
		}
	}
	slices.SortStableFunc(todo, func(a, b *jobpod.Pod) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Attempt, b.Attempt))
	})
	for _, pod := range todo {
		ix := pod.Index
		if pod.Phase == corev1.PodSucceeded {
			s.recordSucceeded(ix, pod)
			continue
		}
		if s.uncountedFull() {
			continue
		}
		f := s.classify(pod)
		switch {
		case !f.Failed:
			continue
		case f.RestartsJob && s.job.Spec.MaxRestarts != nil:
			s.noteFailure(pod, f)
			continue // decideRestart
		case f.Stopped && s.indexFinished(ix):
			// Failures after the index finished are not counted; its
			// pods go uncounted (keepOnePodPerIndex).
			continue
		case f.Ignored && f.InPlace > 0 && !s.indexFinished(ix):
			// Its end counts nowhere, as a success's: its UID goes with
			// the succeeded ones, with the failures it had in place.
			s.countInPlace(ix, f)
			s.uncountedSucceeded.Insert(pod.UID)
			continue
		case f.Ignored:
			s.noteFailure(pod, f)
			s.ignoredFailures = append(s.ignoredFailures, pod)
			continue
		}
		s.noteFailure(pod, f)
		s.recordFailed(ix, pod, f)
		if m := f.FailsJob(); m != nil && s.failJob == nil {
			s.failJob = m
		}
		if f.FailsIndex && !s.completed.Has(ix) && !s.failedIndexes.Has(ix) {
			s.failedIndexes = s.failedIndexes.Add(ix)
			s.indexFailures = append(s.indexFailures, fmt.Sprintf("Index %d failed for good after %s: %s", ix, attempts(pod.Attempt+1), whyFailed(s.job, pod, f)))
		}
	}
}

// recordSucceeded records a succeeded pod by its index, unless the index
// finished already; a pod that had failures in place also by its UID, in
// the same write that counts them.
func (s *syncState) recordSucceeded(ix int32, pod *jobpod.Pod) {
	if s.indexFinished(ix) {
		return
	}
	if f := s.classify(pod); f.InPlace > 0 {
		if s.uncountedFull() {
			return // recorded once the UIDs before it are released
		}
		s.countInPlace(ix, f)
		s.uncountedSucceeded.Insert(pod.UID)
	}
	s.completed = s.completed.Add(ix)
	s.plan.recorded = append(s.plan.recorded, finishedPod{index: ix, succeeded: true})
}

// recorded: the pod's UID is in uncountedTerminatedPods (its end, or its
// failures in place, are in the status this sync computes).
func (s *syncState) recorded(pod *jobpod.Pod) bool {
	return s.uncountedFailed.Has(pod.UID) || s.uncountedSucceeded.Has(pod.UID)
}

// uncountedFull: uncountedTerminatedPods holds maxUncountedPods UIDs, and
// no more pod is recorded in this sync.
func (s *syncState) uncountedFull() bool {
	return s.uncountedFailed.Len()+s.uncountedSucceeded.Len() >= maxUncountedPods
}

// recordFailed records a failed pod of index ix by its UID in
// uncountedTerminatedPods, with its failures in place (f).
func (s *syncState) recordFailed(ix int32, pod *jobpod.Pod, f jobpod.Failure) {
	s.countInPlace(ix, f)
	s.uncountedFailed.Insert(pod.UID)
	s.plan.recorded = append(s.plan.recorded, finishedPod{index: ix})
}

// countInPlace adds to status.failed the failures a pod of index ix had in
// place, as its end is recorded (Failure.InPlaceRecorded); none once the
// index finished: failures after that are not counted.
func (s *syncState) countInPlace(ix int32, f jobpod.Failure) {
	if !s.indexFinished(ix) {
		s.status.Failed += f.InPlaceRecorded()
	}
}

// failureOf is jobpod.Classify for a pod of this sync (with the matched
// rule, whose retry delay the index's next attempt waits). A pod recorded
// as failed stays a counted failure of its index even if it then
// succeeded: a pod deleted under TerminatingOrFailed is recorded at once
// and may still exit 0 afterwards; its index has lost that attempt all the
// same.
func (s *syncState) failureOf(pod *jobpod.Pod) jobpod.Failure {
	f := s.classify(pod)
	if s.uncountedFailed.Has(pod.UID) && !f.Counted && !f.Stopped {
		return jobpod.Failure{Failed: true, Counted: true, InPlace: f.InPlace}
	}
	return f
}

// failStuckPods asks for the pods still terminating past the job's
// terminatingTimeoutSeconds to be written Failed (plan.failStuck); the
// sync that sees them Failed records them. A sync before the first of the
// others' deadlines comes back then.
func (s *syncState) failStuckPods() {
	if s.job.Spec.TerminatingTimeoutSeconds == nil {
		return
	}
	for _, pod := range s.pods {
		at := jobpod.TerminatingDeadline(s.job, pod)
		switch {
		case at.IsZero():
		case !at.After(s.now):
			s.plan.failStuck = append(s.plan.failStuck, pod)
		default:
			s.plan.requeue(at.Sub(s.now))
		}
	}
}

// releaseFinalizers lets go of every pod whose result is recorded. The
// reconciler removes the finalizers only once the status holding their
// result is written. A pod recorded by its UID goes at once, whatever its
// end: its UID stays in the status until it is released. A failed pod is
// counted only once its tracking finalizer is gone, so that removal is on
// the job's way to its end; a succeeded pod is counted by its index
// already, so its finalizer goes later, when the client has time
// (releaseCounted). A succeeded pod of an index that had failed before is
// let go uncounted. A pod heldForRetry loses only its tracking finalizer
// (plan.countHeld): it is counted now, whatever becomes of the creates of
// its replacement, and its index-retry finalizer keeps it until it is no
// longer held.
func (s *syncState) releaseFinalizers() {
	held := s.heldForRetry()
	for _, pod := range s.pods {
		if s.uncountedFailed.Has(pod.UID) {
			// Recorded as failed by an earlier sync, perhaps of a process
			// that stopped before it wrote the failure record: noted
			// again (once), before its finalizer goes.
			s.noteFailure(pod, s.failureOf(pod))
		}
		switch {
		case !pod.Finalized():
		case pod.Tracked && s.oldGeneration(pod) && !s.recorded(pod):
			// endOldGeneration lets it go.
		case held.Has(pod.UID):
			if s.recorded(pod) {
				s.countHeld(pod)
			}
		case s.recorded(pod), !pod.Tracked:
			// Recorded, or counted already and no longer held.
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		case pod.Phase != corev1.PodSucceeded || !pod.IndexOK || !s.wanted.Has(pod.Index):
		case s.completed.Has(pod.Index):
			if s.releaseCounted(pod) && s.settles(pod) {
				s.plan.settleReleased = append(s.plan.settleReleased, pod)
			}
		case s.failedIndexes.Has(pod.Index):
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		}
	}
	for _, pod := range s.ignoredFailures {
		if !held.Has(pod.UID) {
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		} else {
			s.countHeld(pod)
		}
	}
}

// releaseCounted lets go of a pod whose result is counted: in the
// background (plan.releaseLater, and true), unless someone waits for it to
// go (a kubectl delete, pod garbage collection), when its finalizer goes
// now, once the status is written.
func (s *syncState) releaseCounted(pod *jobpod.Pod) (later bool) {
	if pod.DeletionTimestamp != nil {
		s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		return false
	}
	s.plan.releaseLater = append(s.plan.releaseLater, pod)
	return true
}

// countHeld lets a held pod's tracking finalizer go and keeps its
// index-retry finalizer. A pod made before the index-retry finalizer
// existed has none: it keeps its tracking finalizer until it is no longer
// held, as upstream keeps its pods.
func (s *syncState) countHeld(pod *jobpod.Pod) {
	if pod.Tracked && pod.Held {
		s.plan.countHeld = append(s.plan.countHeld, pod)
	}
}

// heldForRetry are the failed pods that keep their index-retry finalizer
// although their result is recorded: with backoffLimitPerIndex, the latest
// pod of an index still to be retried carries the index's failure counts
// and the time its backoff runs from. A deleted pod (evicted, or removed by
// a user) goes from the API server as soon as its finalizers do; without it
// the next pod of the index would start at attempt 0 with no failures and
// no delay. It is let go once the replacement exists (it is then the
// latest), the index finished, or the job reached its end, as upstream's
// podsWithDelayedDeletionPerIndex.
func (s *syncState) heldForRetry() sets.Set[types.UID] {
	held := sets.New[types.UID]()
	if s.job.Spec.BackoffLimitPerIndex == nil || s.target != nil {
		return held
	}
	s.indexes.each(func(ix int32, st *indexState) {
		if !s.completed.Has(ix) && !s.failedIndexes.Has(ix) && s.failureOf(st.latest).Failed {
			held.Insert(st.latest.UID)
		}
	})
	return held
}
