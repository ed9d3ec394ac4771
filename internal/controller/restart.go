package controller

import (
	"fmt"
	"slices"

	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// A podFailurePolicy RestartJob rule restarts the job's pods together, as
// one group. Every pod carries its generation (the restart-attempt label:
// status.restarts when it was created). A restart is decided from a
// failed pod of the current generation that the rule matched: the status
// that raises status.restarts is the whole decision, so a restart is made
// once however often the sync runs, and whichever pods of the generation
// failed together. From then on every pod of an earlier generation counts
// for nothing (jobpod.OldGeneration): it is stopped, let go of uncounted,
// and no pod of the new generation starts before every one of them has
// finished or gone. The generations never overlap.

// classify is jobpod.Classify for a pod of this sync, with the job as this
// sync sees it: a restart decided in it makes the pods before it an
// earlier generation.
func (s *syncState) classify(pod *jobpod.Pod) jobpod.Failure {
	return jobpod.Classify(s.current, pod)
}

// oldGeneration: the pod was created before the job's latest restart,
// counting one this sync decided.
func (s *syncState) oldGeneration(pod *jobpod.Pod) bool {
	return jobpod.OldGeneration(s.current, pod)
}

// decideRestart looks, among the failures recordFinishedPods left to it,
// for those of the current generation a RestartJob rule matched. Found,
// it restarts the job's pods (status.restarts + 1): the other failures and
// the successes of the generation recorded before it stay recorded
// (restartIndexes All clears the index sets). A job that reached its end,
// whose pods a FailJob rule fails in this sync, or that made
// spec.maxRestarts restarts already, restarts nothing: the failures are
// recorded and counted as a Count rule's, and the last fails the job
// with MaxRestartsExceeded (restartsExhausted).
func (s *syncState) decideRestart() {
	job := s.job
	if job.Spec.MaxRestarts == nil {
		return
	}
	var matched []*jobpod.Pod
	var firstPod *jobpod.Pod
	var first *jobpod.Match
	for _, ix := range s.indexOrder() {
		for _, pod := range s.indexes.get(ix).pods {
			if !pod.Tracked || s.recorded(pod) {
				continue
			}
			if f := s.classify(pod); f.RestartsJob {
				if firstPod == nil || pod.FinishedAt.Before(firstPod.FinishedAt) {
					firstPod, first = pod, f.Match
				}
				matched = append(matched, pod)
			}
		}
	}
	switch {
	case len(matched) == 0:
		return
	case currentTarget(s.status) != nil || s.failJob != nil || s.unreadableIndexes:
		s.recordRestartFailures(matched)
		return
	case s.status.Restarts >= *job.Spec.MaxRestarts:
		s.recordRestartFailures(matched)
		s.restartsExhausted = first
		return
	}
	s.status.Restarts++
	current := *s.job
	current.Status.Restarts = s.status.Restarts
	s.current = &current
	rule := job.Spec.PodFailurePolicy.Rules[first.Rule]
	scope := "its unfinished indexes start again"
	if rule.RestartIndexes == ibjv1.RestartAllIndexes {
		s.completed, s.failedIndexes = indexset.Set{}, indexset.Set{}
		scope = "every index starts again"
	}
	s.plan.warn("Restarting", "Restart %d of %d: %s; the job's pods stop, and once none is left %s", s.status.Restarts,
		*job.Spec.MaxRestarts, first.Message, scope)
}

// recordRestartFailures records failures a RestartJob rule matched that
// make no restart, as counted failures.
func (s *syncState) recordRestartFailures(pods []*jobpod.Pod) {
	for _, pod := range pods {
		if s.uncountedFull() {
			return
		}
		s.recordFailed(pod.Index, pod, s.classify(pod))
	}
}

// setAsideOldGeneration takes the pods of an earlier generation out of
// their indexes' active pods (into oldPods), so that no phase keeps,
// counts or replaces them as its own: endOldGeneration ends them. A
// terminating one still counts among its index's terminating pods.
func (s *syncState) setAsideOldGeneration() {
	if s.job.Spec.MaxRestarts == nil {
		return
	}
	for _, ix := range s.indexOrder() {
		st := s.indexes.get(ix)
		if slices.ContainsFunc(st.active, s.oldGeneration) {
			// A copy: an index's active pods may share s.pods' array.
			st.active = slices.DeleteFunc(slices.Clone(st.active), s.oldGeneration)
		}
		for _, pod := range st.pods {
			if s.oldGeneration(pod) {
				s.oldPods = append(s.oldPods, pod)
			}
		}
	}
}

// endOldGeneration stops the pods of an earlier generation: an active
// one is deleted. Each keeps its finalizers as its index's record (its
// attempt number, its failure counts) until its index has a pod of the new
// generation or finished, and is then let go of uncounted. A pod recorded
// before the restart (a failure counted while its generation ran) keeps
// its record, and releaseFinalizers lets it go.
func (s *syncState) endOldGeneration() {
	for _, pod := range s.oldPods {
		switch {
		case pod.Active():
			s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, reason: "restarted with the job's other pods"})
			s.terminating++
		case pod.Tracked && !s.recorded(pod) && s.replaced(pod):
			s.plan.discard = append(s.plan.discard, pod)
		}
	}
}

// replaced: the old pod's index has a pod of the current generation, or
// needs none (it finished).
func (s *syncState) replaced(old *jobpod.Pod) bool {
	if s.indexFinished(old.Index) {
		return true
	}
	for _, pod := range s.indexes.get(old.Index).pods {
		if !s.oldGeneration(pod) {
			return true
		}
	}
	return false
}

// oldPodsLeft is how many pods of an earlier generation have not finished:
// the new generation waits for them.
func (s *syncState) oldPodsLeft() int {
	n := 0
	for _, pod := range s.oldPods {
		if !pod.Finished() {
			n++
		}
	}
	return n
}

// restartsExhaustedMessage says why the job fails with MaxRestartsExceeded.
func (s *syncState) restartsExhaustedMessage() string {
	return fmt.Sprintf("Job has restarted its pods %d times, the most spec.maxRestarts allows, and a RestartJob rule matched again: %s",
		ptr.Deref(s.job.Spec.MaxRestarts, 0), s.restartsExhausted.Message)
}
