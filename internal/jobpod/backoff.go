package jobpod

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Backoff is the delay before a failed pod is replaced: Base after the first
// failure, twice the previous delay after each further one, at most Max.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultBackoff is the built-in Job controller's: 10 s, 20 s, 40 s … 10 min.
// The operator's --pod-failure-backoff flags change it cluster-wide.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Minute}

// Delay is the wait after the given number of consecutive failures. A zero
// Base replaces failed pods at once.
func (b Backoff) Delay(failures int32) time.Duration {
	if failures <= 0 || b.Base <= 0 {
		return 0
	}
	d := b.Base
	for i := int32(1); i < failures; i++ {
		d *= 2
		if d >= b.Max || d <= 0 {
			return b.Max
		}
	}
	return min(d, b.Max)
}

// ForJob is the backoff of one job: its spec.retryBackoff where set, b (the
// operator's defaults) otherwise.
func (b Backoff) ForJob(job *ibjv1.IndexedBatchJob) Backoff {
	rb := job.Spec.RetryBackoff
	if rb == nil {
		return b
	}
	if rb.InitialDelaySeconds != nil {
		b.Base = time.Duration(*rb.InitialDelaySeconds) * time.Second
	}
	if rb.MaxDelaySeconds != nil {
		b.Max = time.Duration(*rb.MaxDelaySeconds) * time.Second
	}
	return b
}

// NextCounts are the failure counts the next pod of p's index carries, p
// being the index's latest pod and f how its end counts: p's own counts,
// plus its failure where it counted or an Ignore rule matched it.
func NextCounts(p *Pod, f Failure) (failures, ignored int32) {
	failures, ignored = p.Failures, p.Ignored
	switch {
	case f.Ignored:
		ignored++
	case f.Counted:
		failures++
	}
	return failures, ignored
}

// IndexRetryAt is when, with backoffLimitPerIndex, the index of a failed
// pod p (its latest, whose end counts as f) may start its next attempt:
// the delay grows with every earlier failure of the index, ignored ones
// included, and runs from p's end.
func (b Backoff) IndexRetryAt(p *Pod, f Failure) time.Time {
	failures, ignored := NextCounts(p, f)
	return p.FinishedAt.Add(b.Delay(failures + ignored))
}

// JobEnds gathers the ends that the job-wide backoff (a job without
// backoffLimitPerIndex) is decided from, as upstream's backoff record: the
// failures since the last success.
type JobEnds struct {
	lastSuccess time.Time
	failures    []time.Time
}

// Add takes in one pod of the job and how its end counts.
func (e *JobEnds) Add(p *Pod, f Failure) {
	switch {
	case p.Phase == corev1.PodSucceeded:
		if p.FinishedAt.After(e.lastSuccess) {
			e.lastSuccess = p.FinishedAt
		}
	case f.Failed:
		e.failures = append(e.failures, p.FinishedAt)
	}
}

// AddFailure takes in the failure, at finishedAt, of a pod that is gone.
func (e *JobEnds) AddFailure(finishedAt time.Time) {
	e.failures = append(e.failures, finishedAt)
}

// RetryAt is when the job-wide backoff lets a replacement start: the delay
// grows with the failures that ended after the last success and runs from
// the latest of them. Zero when no failure waits.
func (e *JobEnds) RetryAt(b Backoff) time.Time {
	var failures int32
	var last time.Time
	for _, t := range e.failures {
		if t.After(e.lastSuccess) {
			failures++
			if t.After(last) {
				last = t
			}
		}
	}
	if failures == 0 {
		return time.Time{}
	}
	return last.Add(b.Delay(failures))
}
