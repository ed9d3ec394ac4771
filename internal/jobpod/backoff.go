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

// CreateRefusedDelay is the job's retryBackoff.createRefusedDelaySeconds:
// how long after a refused pod create the operator tries again; zero when
// unset (the operator's retry of a failed sync decides).
func CreateRefusedDelay(job *ibjv1.IndexedBatchJob) time.Duration {
	if rb := job.Spec.RetryBackoff; rb != nil && rb.CreateRefusedDelaySeconds != nil {
		return time.Duration(*rb.CreateRefusedDelaySeconds) * time.Second
	}
	return 0
}

// NextCounts are the failure counts the next pod of p's index carries, p
// being the index's latest pod and f how its end counts: p's own counts,
// plus its failures in place, plus its failure where it counted or an
// Ignore rule matched it.
func NextCounts(p *Pod, f Failure) (failures, ignored int32) {
	failures, ignored = p.Failures+f.InPlace, p.Ignored
	switch {
	case f.Ignored:
		ignored++
	case f.Counted:
		failures++
	}
	return failures, ignored
}

// RetryDelay is the wait after a failure that counts as f, failures being
// the counted failures it makes (its own included): the matched rule's
// retryDelaySeconds where set, none after an ignored failure, the
// exponential delay otherwise.
func (b Backoff) RetryDelay(failures int32, f Failure) time.Duration {
	switch {
	case f.Match != nil && f.Match.RetryDelay != nil:
		return *f.Match.RetryDelay
	case f.Ignored:
		return 0
	}
	return b.Delay(failures)
}

// IndexRetryAt is when, with backoffLimitPerIndex, the index of a failed
// pod p (its latest, whose end counts as f) may start its next attempt:
// RetryDelay after p's end, the exponential delay growing with the index's
// counted failures (ignored ones never count).
func (b Backoff) IndexRetryAt(p *Pod, f Failure) time.Time {
	failures, _ := NextCounts(p, f)
	return p.FinishedAt.Add(b.RetryDelay(failures, f))
}

// JobEnds gathers the ends that the job-wide backoff (a job without
// backoffLimitPerIndex) is decided from, as upstream's backoff record: the
// failures since the last success. It keeps a time or two per failure,
// never the pods: the kubectl plugin feeds it every pod of a job a page at
// a time.
type JobEnds struct {
	lastSuccess time.Time
	// counted are the ends of the counted failures; exponential those of
	// the counted failures that wait the exponential delay (no rule's
	// retryDelaySeconds).
	counted, exponential []time.Time
	// fixed are the failures that wait a fixed delay: a rule's
	// retryDelaySeconds, or none after an ignored failure.
	fixed []fixedWait
}

// fixedWait is a failure's end and the time its fixed delay lets the next
// pod start.
type fixedWait struct{ end, until time.Time }

// Add takes in one pod of the job and how its end counts.
func (e *JobEnds) Add(p *Pod, f Failure) {
	switch {
	case p.Phase == corev1.PodSucceeded:
		e.AddSuccess(p.FinishedAt)
	case f.Failed:
		e.AddFailure(p.FinishedAt, f)
	}
}

// AddSuccess takes in a success that ended at finishedAt: that of a pod of
// the job, or the latest of those a sync no longer reads.
func (e *JobEnds) AddSuccess(finishedAt time.Time) {
	if finishedAt.After(e.lastSuccess) {
		e.lastSuccess = finishedAt
	}
}

// AddFailure takes in a failure that ended at finishedAt and counts as f:
// that of a pod of the job, or of one that is gone.
func (e *JobEnds) AddFailure(finishedAt time.Time, f Failure) {
	if f.Counted {
		e.counted = append(e.counted, finishedAt)
	}
	if f.Counted && (f.Match == nil || f.Match.RetryDelay == nil) {
		e.exponential = append(e.exponential, finishedAt)
		return
	}
	var wait time.Duration // an ignored failure without a rule's delay waits nothing
	if f.Match != nil && f.Match.RetryDelay != nil {
		wait = *f.Match.RetryDelay
	}
	e.fixed = append(e.fixed, fixedWait{end: finishedAt, until: finishedAt.Add(wait)})
}

// RetryAt is when the job-wide backoff lets a replacement start: once each
// failure since the last success has waited its RetryDelay. A counted
// failure without a rule's retryDelaySeconds waits the exponential delay
// of the counted failures since the last success up to its end (ignored
// ones never count), so these together wait from the latest of them, as
// upstream's record does; a failure with a rule's delay waits that from
// its end, an ignored one without nothing. Zero without a failure since
// the last success.
func (e *JobEnds) RetryAt(b Backoff) time.Time {
	var at, lastExponential time.Time
	for _, t := range e.exponential {
		if t.After(e.lastSuccess) && t.After(lastExponential) {
			lastExponential = t
		}
	}
	if !lastExponential.IsZero() {
		var n int32
		for _, t := range e.counted {
			if t.After(e.lastSuccess) && !t.After(lastExponential) {
				n++
			}
		}
		at = lastExponential.Add(b.Delay(n))
	}
	for _, w := range e.fixed {
		if w.end.After(e.lastSuccess) && (at.IsZero() || w.until.After(at)) {
			at = w.until
		}
	}
	return at
}
