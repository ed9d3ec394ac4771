package controller

import "time"

// Backoff is the delay before a failed pod is replaced: Base after the first
// failure, doubling with each further one, never more than Max. Upstream
// uses 10 s and 10 min; so does DefaultBackoff.
type Backoff struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultBackoff is the built-in Job controller's: 10 s, 20 s, 40 s … 10 min.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Minute}

// Delay is the wait after the given number of consecutive failures.
func (b Backoff) Delay(failures int32) time.Duration {
	if failures <= 0 {
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
