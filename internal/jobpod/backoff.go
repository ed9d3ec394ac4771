package jobpod

import (
	"slices"
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
// failures since the last success.
type JobEnds struct {
	lastSuccess time.Time
	failures    []jobFailure
}

type jobFailure struct {
	at time.Time
	f  Failure
}

// Add takes in one pod of the job and how its end counts.
func (e *JobEnds) Add(p *Pod, f Failure) {
	switch {
	case p.Phase == corev1.PodSucceeded:
		if p.FinishedAt.After(e.lastSuccess) {
			e.lastSuccess = p.FinishedAt
		}
	case f.Failed:
		e.AddFailure(p.FinishedAt, f)
	}
}

// AddFailure takes in the failure, at finishedAt, of a pod that is gone,
// f being how it counted.
func (e *JobEnds) AddFailure(finishedAt time.Time, f Failure) {
	e.failures = append(e.failures, jobFailure{at: finishedAt, f: f})
}

// RetryAt is when the job-wide backoff lets a replacement start: once each
// failure since the last success has waited its RetryDelay, the
// exponential delay of a counted failure growing with the counted failures
// since the last success up to it (ignored ones never count). Without
// rules, that is the latest failure's end plus the delay of all of them,
// as upstream. Zero without a failure since the last success.
func (e *JobEnds) RetryAt(b Backoff) time.Time {
	since := make([]jobFailure, 0, len(e.failures))
	for _, x := range e.failures {
		if x.at.After(e.lastSuccess) {
			since = append(since, x)
		}
	}
	slices.SortStableFunc(since, func(a, b jobFailure) int { return a.at.Compare(b.at) })
	var counted int32
	var at time.Time
	for _, x := range since {
		if x.f.Counted {
			counted++
		}
		if t := x.at.Add(b.RetryDelay(counted, x.f)); t.After(at) {
			at = t
		}
	}
	return at
}
