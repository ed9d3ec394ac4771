package controller

import (
	"time"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// stopPods ends the pods of a job that reached its end. When it fails, as
// upstream, every pod that has not finished counts as failed and is
// deleted; when it succeeds, lingering pods go without being counted.
func (s *syncState) stopPods() {
	failing := s.target.Type == ibjv1.ConditionFailureTarget
	for _, ix := range s.indexOrder() {
		st := s.indexes.get(ix)
		s.terminating += st.terminating
		for _, pod := range st.pods {
			if pod.Finished() || s.oldGeneration(pod) {
				continue // recorded, or ignored; or ended by a restart (endOldGeneration)
			}
			switch {
			case failing:
				if pod.Tracked && !s.uncountedFailed.Has(pod.UID) && !s.uncountedFull() {
					s.recordFailed(ix, pod, jobpod.Failure{InPlace: jobpod.InPlaceFailures(s.job, pod)})
				}
				if pod.DeletionTimestamp == nil {
					s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, reason: s.target.Reason})
					s.terminating++
				}
			case pod.DeletionTimestamp == nil && s.uncountedFailed.Has(pod.UID):
				s.deleteCounted(pod, s.target.Reason)
			case pod.DeletionTimestamp == nil:
				s.deleteUncounted(pod, s.target.Reason)
			case pod.Finalized() && !s.uncountedFailed.Has(pod.UID):
				s.plan.discard = append(s.plan.discard, pod)
			}
		}
	}
}

// deleteCounted deletes a pod recorded as failed while it ran (a Stopped
// pod): its finalizer goes once the status that records it is written.
func (s *syncState) deleteCounted(pod *jobpod.Pod, reason string) {
	s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, reason: reason})
	s.terminating++
}

// deleteUncounted deletes a pod whose end must not count: its finalizer
// goes first.
func (s *syncState) deleteUncounted(pod *jobpod.Pod, reason string) {
	s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, stripFinalizer: true, reason: reason})
	s.terminating++
}

// decideEnd is the second phase of the end: Complete or Failed once nothing
// is left running or terminating, every finished pod is counted, and the
// cache is current.
func (s *syncState) decideEnd() {
	s.terminating += s.unwantedPods
	if s.target == nil || s.terminating > 0 || s.uncountedFailed.Len()+s.uncountedSucceeded.Len() > 0 || !s.expectationsSatisfied {
		return
	}
	c := setFinished(s.status, s.job.Generation, s.now, s.target)
	s.plan.newlyFinished = c
	s.plan.events = append(s.plan.events, finishedEvent(c))
	if ttl := s.job.Spec.TTLSecondsAfterFinished; ttl != nil {
		s.plan.requeue(time.Duration(*ttl) * time.Second)
	}
}

// releaseFinishedJob handles a job that is Complete or Failed: it lets go of
// any pod still held by a tracking finalizer (a finished one whenever the
// client has time: every result is counted; a deleted one at once),
// removes pods still running, and deletes the job once
// ttlSecondsAfterFinished passed (the pods' finalizers go first).
func (s *syncState) releaseFinishedJob() {
	for _, pod := range s.pods {
		switch {
		case pod.Active():
			s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, stripFinalizer: true, reason: "job finished"})
		case !pod.Finalized():
		case pod.Finished():
			s.releaseCounted(pod)
		default: // being deleted: its finalizer is all that keeps it
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		}
	}
	ttl := s.job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return
	}
	at, ok := finishedAt(s.job)
	if !ok {
		return
	}
	if left := at.Add(time.Duration(*ttl) * time.Second).Sub(s.now); left > 0 {
		s.plan.requeue(left)
		return
	}
	s.plan.deleteJob = true
}
