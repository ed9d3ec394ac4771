// Package apicheck watches whether kube-apiserver answers the operator, so
// that an outage shows where an operator of the cluster looks: in the log,
// once when it starts and once when it ends (with its length), and in the
// readiness probe, which fails while it lasts. While the operator's own
// requests are answered, that is the answer, and no probe is sent.
package apicheck

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
)

// Checker asks kube-apiserver's /readyz every Interval, unless a request
// sent through a transport it wrapped (WrapTransport) was answered within
// the Interval. Once the server has not answered ready for Grace, Check
// fails with the time since the last answer and the last error. It needs
// no leader election: a standby's readiness tells about its own connection
// too.
type Checker struct {
	// Client sends the probes (a client of its own, so that the
	// controller's rate limit never holds them back).
	Client rest.Interface
	// Interval between probes, and Grace: how long failures may last
	// before Check reports them (a blip of one probe is no outage).
	Interval, Grace time.Duration
	// Timeout of one probe; default Interval.
	Timeout time.Duration
	Log     logr.Logger
	Clock   clock.PassiveClock

	mu sync.Mutex
	// lastOK is the last ready answer; failingSince the first failure after it.
	lastOK, failingSince time.Time
	lastErr              error
	reported             bool
	// answered is when a wrapped transport last got an answer (Unix
	// nanoseconds on Clock; 0: never).
	answered atomic.Int64
}

// WrapTransport returns rt booking each answer below 500 as a sign that
// the server works: a busy controller's own requests then stand in for
// the probes, which would each cost a request at its QPS limit. Server
// errors and requests that got no answer are not booked; the probes judge
// those.
func (c *Checker) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.StatusCode < http.StatusInternalServerError {
			c.answered.Store(c.Clock.Now().UnixNano())
		}
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// NeedLeaderElection implements manager.LeaderElectionRunnable.
func (c *Checker) NeedLeaderElection() bool { return false }

// Start probes until ctx ends.
func (c *Checker) Start(ctx context.Context) error {
	ticker := time.NewTicker(c.Interval)
	defer ticker.Stop()
	for {
		c.Probe(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// Probe asks once and books the answer; a wrapped transport's answer
// within the Interval stands for it.
func (c *Checker) Probe(ctx context.Context) {
	if last := c.answered.Load(); last != 0 && c.Clock.Since(time.Unix(0, last)) < c.Interval {
		c.book(nil)
		return
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = c.Interval
	}
	probeCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := c.Client.Get().AbsPath("/readyz").Do(probeCtx).Error()
	if ctx.Err() != nil {
		return
	}
	c.book(err)
}

func (c *Checker) book(err error) {
	now := c.Clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		if c.reported {
			c.Log.Info("kube-apiserver answers again", "unreachableFor", now.Sub(c.failingSince).Round(time.Second).String())
		}
		c.lastOK, c.failingSince, c.lastErr, c.reported = now, time.Time{}, nil, false
		return
	}
	if c.failingSince.IsZero() {
		c.failingSince = now
	}
	c.lastErr = err
	if !c.reported && now.Sub(c.failingSince) >= c.Grace {
		c.reported = true
		c.Log.Error(err, "kube-apiserver does not answer; the controller waits for it and resumes by itself", "since", c.failingSince.UTC().Format(time.RFC3339))
	}
}

// Check implements healthz.Checker: an error while kube-apiserver has not
// answered ready for Grace.
func (c *Checker) Check(_ *http.Request) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failingSince.IsZero() || c.Clock.Since(c.failingSince) < c.Grace {
		return nil
	}
	return fmt.Errorf("kube-apiserver has not answered for %s: %v", c.Clock.Since(c.failingSince).Round(time.Second), c.lastErr)
}
