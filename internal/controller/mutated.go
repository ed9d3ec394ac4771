package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// A mutating admission webhook or policy may change a pod on its way in:
// strip a label the operator finds its pods by, a finalizer it counts them
// by, the restart rules of a retry in place. The API server's answer to
// the create is the pod as admission left it: the operator compares it
// with what it asked for (podbuild.Mutations). A pod changed in what the
// operator relies on is deleted at once, never counted (its finalizers
// go first), and the create counts as refused: the job's status says why
// (condition PodCreationFailed, reason PodMutated, naming the field), the
// job stops creating, and tries again after mutatedDelay, so that a policy
// fixed since lets it go on. The condition stays until a minute passes
// without a mutated create: a process that starts meanwhile paces the job
// from it, so that restarts do not reset the pace. Without this, a pod stripped of its job-name
// label is one the job never sees, and it creates another, and another.

// MutatedPodError is a create whose pod came back from admission changed
// in what the operator relies on.
type MutatedPodError struct {
	Pod       string
	Mutations []podbuild.Mutation
}

func (e *MutatedPodError) Error() string {
	parts := make([]string, len(e.Mutations))
	for i, m := range e.Mutations {
		parts[i] = m.String()
	}
	return fmt.Sprintf("admission changed pod %s in what the operator relies on: %s; the pod was deleted, and the job creates no pod until a create comes back as asked for",
		e.Pod, strings.Join(parts, "; "))
}

// isMutated: err is a MutatedPodError.
func isMutated(err error) bool {
	var m *MutatedPodError
	return errors.As(err, &m)
}

// The wait after a create came back mutated, when the job sets no
// retryBackoff.createRefusedDelaySeconds: mutatedDelayBase, doubling with
// each mutated create in a row, at most mutatedDelayMax. A job then
// creates at most three pods in a minute while its creates come back
// mutated (at 0, 10 and 30 s), whatever its parallelism: the slow start
// stops at the first mutated one.
const (
	mutatedDelayBase = 10 * time.Second
	mutatedDelayMax  = time.Minute
)

// mutatedDelay is how long a job waits after its n-th create in a row
// came back mutated. A job's createRefusedDelaySeconds is kept, but never
// below mutatedFloor.
func mutatedDelay(job *ibjv1.IndexedBatchJob, n int32) time.Duration {
	if d := jobpod.CreateRefusedDelay(job); d > 0 {
		return max(d, mutatedFloor(job))
	}
	d := mutatedDelayBase
	for i := int32(1); i < n && d < mutatedDelayMax; i++ {
		d *= 2
	}
	return min(d, mutatedDelayMax)
}

// mutatedFloor is the least time between two creates of a job within a
// minute of one that came back mutated: a minute over parallelism+1,
// rounded up to the second. Such a job creates one pod a sync, so it
// creates at most parallelism+2 pods in any minute while its creates come
// back mutated, even when admission rewrites only some of them and the
// creates between come back as asked for.
func mutatedFloor(job *ibjv1.IndexedBatchJob) time.Duration {
	floor := time.Minute / time.Duration(max(ptr.Deref(job.Spec.Parallelism, 1), 0)+1)
	return floor.Truncate(time.Second) + time.Second
}

// discardMutated deletes a pod admission changed, without counting it:
// its finalizers go first (if it kept them), then the pod.
func (r *Reconciler) discardMutated(ctx context.Context, job *ibjv1.IndexedBatchJob, created *corev1.Pod) error {
	return r.deletePods(ctx, job, []podDeletion{{pod: jobpod.Read(created), stripFinalizer: true, reason: "mutated"}})
}

// createsMutated remembers that a create of the job came back mutated at
// now (and how many in a row), or that one came back as asked for: that
// ends the wait, not the pacing of the minute after the last mutated one.
func (s *jobStates) createsMutated(uid types.UID, mutated bool, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.state(uid)
	if mutated {
		j.mutatedInARow++
		j.createMutated = now
	} else {
		j.mutatedInARow = 0
	}
	j.pacedCreate = now
}

// mutatedUntil is when the job may create a pod again after its creates
// came back mutated, zero when none did within a minute of now. Not zero,
// the job creates one pod a sync (startPods): after a mutated create it
// waits mutatedDelay, after one as asked for mutatedFloor, until a minute
// passes without a mutated create. A job whose status says its creates
// come back mutated, which this process has not seen (a restart, a
// failover), is paced from now.
func (s *jobStates) mutatedUntil(job *ibjv1.IndexedBatchJob, now time.Time) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[job.UID]
	if (j == nil || j.createMutated.IsZero()) && podMutatedCondition(&job.Status) {
		j = s.state(job.UID)
		j.createMutated = now
	}
	switch {
	case j == nil || j.createMutated.IsZero():
		return time.Time{}
	case j.mutatedInARow > 0:
		return j.createMutated.Add(mutatedDelay(job, j.mutatedInARow))
	case now.Sub(j.createMutated) >= time.Minute:
		j.createMutated, j.pacedCreate = time.Time{}, time.Time{}
		return time.Time{}
	}
	return later(j.createMutated, j.pacedCreate.Add(mutatedFloor(job)))
}

// mutatedMinuteEnds is when a minute will have passed since the job's last
// mutated create (this process's record, or when it found the job's status
// saying so), zero if none is recorded. Until then the job's condition
// PodCreationFailed (PodMutated) stays, creates as asked for or not: it is
// what paces the job from its first sync in a process started meanwhile.
func (s *jobStates) mutatedMinuteEnds(uid types.UID) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[uid]
	if j == nil || j.createMutated.IsZero() {
		return time.Time{}
	}
	return j.createMutated.Add(time.Minute)
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
