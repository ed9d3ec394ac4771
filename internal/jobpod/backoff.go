package jobpod

import (
	"time"

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
