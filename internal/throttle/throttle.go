// Package throttle is the operator's client-side rate limiter: a token
// bucket, as client-go's, whose waiters are released on a coarse tick.
//
// It is kept instead of client-go's flowcontrol.NewTokenBucketRateLimiter
// for a measured reason: when the operator runs at its QPS limit, releasing
// the waiting requests together on a tick costs clearly less CPU than
// releasing each on its own timer, at the same rate. With a tick of 0 it
// behaves as client-go's bucket. The measurements and the decision are in
// docs/bench/library-choices.md; measure again before switching.
package throttle

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/client-go/util/flowcontrol"
)

// Limiter is a token bucket of qps tokens a second holding at most burst.
// A request that finds a token goes at once; one that has to wait for a
// token is let go at the first multiple of tick at or after the moment its
// token is due, never before it. Waiters due within one tick therefore
// wake together, and their requests go out together: the API client then
// writes and reads them in fewer system calls and goroutine wake-ups than
// when one request leaves every 1/qps seconds. The rate is client-go's
// exactly (the bucket is the same); a request waits at most tick longer.
type Limiter struct {
	bucket *rate.Limiter
	tick   time.Duration
	// lastForeground is when a foreground request last asked for a token
	// (Unix nanoseconds).
	lastForeground atomic.Int64
	// busy, when set, says the API server is the limit now
	// (SetServerBusy).
	busy atomic.Pointer[func() bool]
	// overdue counts the background requests past their deadline that
	// wait for a token (waitOverdue); lead is how many more tokens the
	// foreground took than they did while any waited (not below 0). The
	// foreground waits while both are above 0 (shareWithOverdue).
	overdue, lead atomic.Int64
}

// SetServerBusy makes background requests wait while busy says the API
// server is busy (a 429's Retry-After, slow writes: internal/serverload),
// whatever tokens the bucket holds, until their deadline
// (BackgroundUntil): while the server is the limit, a spare token spent
// on work that may wait is a seat the foreground waits for.
func (l *Limiter) SetServerBusy(busy func() bool) { l.busy.Store(&busy) }

func (l *Limiter) serverBusy() bool {
	f := l.busy.Load()
	return f != nil && (*f)()
}

// foregroundQuiet is how long after the last foreground request the
// background keeps half the burst free for the next one.
const foregroundQuiet = 500 * time.Millisecond

var _ flowcontrol.RateLimiter = (*Limiter)(nil)

// New returns a Limiter; tick 0 releases each waiter when its token is due,
// as client-go's token bucket does.
func New(qps float32, burst int, tick time.Duration) *Limiter {
	return &Limiter{bucket: rate.NewLimiter(rate.Limit(qps), burst), tick: tick}
}

// TryAccept takes a token if one is there.
func (l *Limiter) TryAccept() bool { return l.bucket.Allow() }

// Accept waits for a token.
func (l *Limiter) Accept() { _ = l.Wait(context.Background()) }

// Stop does nothing: the Limiter holds no goroutine.
func (l *Limiter) Stop() {}

// QPS is the rate the Limiter was made with.
func (l *Limiter) QPS() float32 { return float32(l.bucket.Limit()) }

// Wait takes a token, waiting for it to be due and then for the next tick.
// If ctx ends first the token is given back. A request whose ctx is marked
// with Background takes only a spare token (see Background).
func (l *Limiter) Wait(ctx context.Context) error {
	if IsBackground(ctx) {
		if err := l.waitSpare(ctx); err != errDeadline {
			return err
		}
		// Past its deadline: it shares the rate with the foreground.
		return l.waitOverdue(ctx)
	}
	l.lastForeground.Store(time.Now().UnixNano())
	if err := l.shareWithOverdue(ctx); err != nil {
		return err
	}
	return l.reserve(ctx, time.Now())
}

// reserve takes the next token and waits until it is due and the tick
// after.
func (l *Limiter) reserve(ctx context.Context, now time.Time) error {
	r := l.bucket.ReserveN(now, 1)
	if !r.OK() {
		return fmt.Errorf("rate limiter: a burst of %d allows no request", l.bucket.Burst())
	}
	wait := releaseDelay(now, r.DelayFrom(now), l.tick)
	if wait == 0 {
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(now.Add(wait)) {
		r.CancelAt(now)
		return fmt.Errorf("rate limiter: waiting %v would exceed the context's deadline", wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return ctx.Err()
	}
}

// waitOverdue takes a token for a background request past its deadline,
// as soon as the bucket holds one: neither the reserve kept for the
// foreground nor the server's business holds it, and while it waits the
// foreground takes no more tokens than the overdue requests do
// (shareWithOverdue). It so waits for the tokens the foreground reserved
// before it came (at most the client's queue, a turn) and then for at
// most every other token, never behind a turn of the foreground's per
// request.
func (l *Limiter) waitOverdue(ctx context.Context) error {
	l.overdue.Add(1)
	defer l.overdue.Add(-1)
	var p pauser
	defer p.stop()
	for {
		now := time.Now()
		if l.bucket.AllowN(now, 1) {
			for v := l.lead.Load(); v > 0 && !l.lead.CompareAndSwap(v, v-1); v = l.lead.Load() {
			}
			return nil
		}
		if err := p.pause(ctx, l.nextLook(now)); err != nil {
			return err
		}
	}
}

// shareWithOverdue holds a foreground request, looking again on every
// tick, while overdue background requests wait (waitOverdue) and the
// foreground has taken more tokens than they since they began to: past
// their deadline, they and the foreground take every other token, so that
// they get at least half the rate and the foreground keeps half.
func (l *Limiter) shareWithOverdue(ctx context.Context) error {
	var p pauser
	defer p.stop()
	for {
		if l.overdue.Load() == 0 {
			return nil
		}
		if v := l.lead.Load(); v <= 0 && l.lead.CompareAndSwap(v, v+1) {
			return nil
		}
		if err := p.pause(ctx, l.nextLook(time.Now())); err != nil {
			return err
		}
	}
}

// pauser sleeps a waiter that polls the bucket between its looks, on one
// timer made at the first pause.
type pauser struct{ t *time.Timer }

// pause sleeps for d, or until ctx ends (its error).
func (p *pauser) pause(ctx context.Context, d time.Duration) error {
	if p.t == nil {
		p.t = time.NewTimer(d)
	} else {
		p.t.Reset(d)
	}
	select {
	case <-p.t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop stops the timer, if a pause made one.
func (p *pauser) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}

type backgroundKey struct{}

// errDeadline ends a background wait whose deadline passed.
var errDeadline = errors.New("background deadline passed")

// Background marks the requests made with the returned context as work
// that may wait: each takes a token only when one is in the bucket, so it
// never takes a token a foreground request is waiting for (those reserve
// theirs ahead and leave the bucket empty), and while the foreground has
// asked within foregroundQuiet, only when the bucket holds more than half
// its burst, which it leaves for the next foreground requests. Background
// requests go at the full rate while nothing else asks, and not at all
// while the foreground uses the whole rate.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, time.Time{})
}

// BackgroundUntil is Background until deadline: a request still waiting
// for a spare token then, or for the server to be no longer busy
// (SetServerBusy), takes every other token with the other overdue ones,
// ahead of the foreground's requests (waitOverdue). It bounds how long
// work that may wait (the finalizer of a counted pod) waits, whatever the
// foreground's load, and the foreground keeps half the rate.
func BackgroundUntil(ctx context.Context, deadline time.Time) context.Context {
	return context.WithValue(ctx, backgroundKey{}, deadline)
}

// IsBackground is whether ctx marks its requests as background (Background).
func IsBackground(ctx context.Context) bool { return ctx.Value(backgroundKey{}) != nil }

// BackgroundDeadline is the deadline of a BackgroundUntil context, zero
// for none.
func BackgroundDeadline(ctx context.Context) time.Time {
	t, _ := ctx.Value(backgroundKey{}).(time.Time)
	return t
}

// waitSpare waits for a spare token (see Background), looking again on
// every tick of the wall clock (every token's time without a tick). The
// waiters share the ticks, as the foreground's do: those that find no
// token wake together on the next tick, share what the bucket gathered
// meanwhile, and their requests go out together, where waiters each on a
// timer of their own would take the tokens one at a time as they come.
func (l *Limiter) waitSpare(ctx context.Context) error {
	deadline := BackgroundDeadline(ctx)
	var p pauser
	defer p.stop()
	for {
		now := time.Now()
		if !deadline.IsZero() && !now.Before(deadline) {
			return errDeadline
		}
		reserve := 0.0
		if now.Sub(time.Unix(0, l.lastForeground.Load())) < foregroundQuiet {
			reserve = float64(l.bucket.Burst() / 2)
		}
		if !l.serverBusy() && l.bucket.TokensAt(now) >= reserve+1 && l.bucket.AllowN(now, 1) {
			return nil
		}
		poll := l.nextLook(now)
		if !deadline.IsZero() {
			poll = min(poll, deadline.Sub(now))
		}
		if err := p.pause(ctx, poll); err != nil {
			return err
		}
	}
}

// nextLook is how long a background waiter that found no spare token at now
// sleeps: to the next tick of the wall clock, strictly after now, or the
// time of one token without a tick.
func (l *Limiter) nextLook(now time.Time) time.Duration {
	if l.tick <= 0 {
		return time.Duration(float64(time.Second) / float64(l.bucket.Limit()))
	}
	return now.Truncate(l.tick).Add(l.tick).Sub(now)
}

// releaseDelay is how long a waiter whose token is due after delay waits:
// until the first multiple of tick (on the wall clock, so that every
// waiter shares the same ticks) at or after now+delay.
func releaseDelay(now time.Time, delay, tick time.Duration) time.Duration {
	if delay <= 0 {
		return 0
	}
	if tick <= 0 {
		return delay
	}
	due := now.Add(delay)
	release := due.Truncate(tick)
	if release.Before(due) {
		release = release.Add(tick)
	}
	return release.Sub(now)
}
