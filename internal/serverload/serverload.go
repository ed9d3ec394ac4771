// Package serverload learns how busy kube-apiserver is from the answers
// to the operator's own requests, so that the operator spends its writes
// by their value when the server, not the client's QPS, is the limit.
//
// A shared kube-apiserver is often the bottleneck of a real cluster: API
// Priority and Fairness queues the requests of a priority level that has
// used its seats, and answers 429 with a Retry-After when its queues are
// full. The client's token bucket knows nothing of it. The Monitor reads
// three signals from every write's response:
//   - a 429: the server asks the client to wait (Retry-After, in seconds);
//   - the write's latency, to its response headers, kept as a moving
//     average: APF's queueing and a saturated server both show there;
//   - APF's headers naming the FlowSchema and priority level that
//     classified the request, logged once, so that an operator of the
//     cluster sees whether the operator runs exempt or queued.
//
// From them it answers Busy (the background yields: finalizer removals of
// counted pods, events, status writes that may wait) and Window, how many
// writes a sync may send at once, grown by one per window of fast answers
// and halved at most once a latency on a slow one or a 429 (additive
// increase, multiplicative decrease, as TCP's congestion window).
package serverload

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
)

// APF's response headers: the UIDs of the FlowSchema and the priority level
// that classified the request.
const (
	FlowSchemaHeader    = "X-Kubernetes-PF-FlowSchema-UID"
	PriorityLevelHeader = "X-Kubernetes-PF-PriorityLevel-UID"
)

// DefaultSlow is the write latency above which the server counts as busy:
// an unloaded kube-apiserver answers a pod create or patch in a few
// milliseconds, and one whose priority level queues the operator's
// requests in hundreds.
const DefaultSlow = 250 * time.Millisecond

// defaultRetryAfter is the wait a 429 without a usable Retry-After asks
// for.
const defaultRetryAfter = time.Second

// staleAfter is how long a latency average is believed without a new
// write.
const staleAfter = 2 * time.Second

// minSamples is how many writes the average needs before their latency
// may call the server busy: one slow answer is no trend.
const minSamples = 8

// Monitor is safe for concurrent use; the zero value is not: use New.
type Monitor struct {
	clock clock.PassiveClock
	slow  time.Duration
	log   logr.Logger

	mu sync.Mutex
	// latency is the moving average of the writes' latency, over about
	// the last 1/alpha writes.
	latency time.Duration
	samples int
	// lastSample is when the last write answered: an average older than
	// staleAfter calls nothing busy, so that the background, which waits
	// while the server is busy, tries again and measures afresh.
	lastSample time.Time
	// retryUntil is when the last 429's Retry-After ends.
	retryUntil time.Time
	throttled  int64
	// window is how many writes a sync may send at once, in 1…maxWindow;
	// grown once good writes have answered a whole window, cut at most
	// once per latency (lastCut).
	window, maxWindow int
	good              int
	lastCut           time.Time
	// flowSchema and priorityLevel are the last APF classification seen.
	flowSchema, priorityLevel string
}

// alpha is the weight of a new write's latency in the average.
const alpha = 0.1

// New returns a Monitor that calls the server busy above a write latency
// of slow (0: DefaultSlow) and lets a sync send at most maxWindow writes
// at once.
func New(clk clock.PassiveClock, slow time.Duration, maxWindow int, log logr.Logger) *Monitor {
	if slow <= 0 {
		slow = DefaultSlow
	}
	maxWindow = max(maxWindow, 1)
	return &Monitor{clock: clk, slow: slow, log: log, window: maxWindow, maxWindow: maxWindow}
}

// WrapTransport observes the responses to the writes sent through rt, for
// rest.Config.Wrap.
func (m *Monitor) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{m: m, next: rt}
}

type roundTripper struct {
	m    *Monitor
	next http.RoundTripper
}

func (t roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if !isWrite(req.Method) {
		return t.next.RoundTrip(req)
	}
	start := t.m.clock.Now()
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		t.m.Observe(resp.StatusCode, t.m.clock.Since(start), resp.Header)
	}
	return resp, err
}

// isWrite: the method changes state (reads and watches are not timed: a
// list's latency grows with its size, a watch's is its lifetime).
func isWrite(method string) bool {
	switch method {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		return true
	}
	return false
}

// Observe records one write's answer: its status code, its latency and
// its headers.
func (m *Monitor) Observe(code int, latency time.Duration, h http.Header) {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.classified(h)
	if code == http.StatusTooManyRequests {
		m.throttled++
		m.retryUntil = maxTime(m.retryUntil, now.Add(retryAfter(h)))
		m.cut(now, true)
		return
	}
	if m.samples == 0 {
		m.latency = latency
	} else {
		m.latency += time.Duration(alpha * float64(latency-m.latency))
	}
	m.samples++
	m.lastSample = now
	if latency > m.slow {
		m.cut(now, false)
		return
	}
	m.good++
	if m.good >= m.window && m.window < m.maxWindow {
		m.window++
		m.good = 0
	}
}

// cut halves the window, at most once per average latency unless the
// server said 429 (force).
func (m *Monitor) cut(now time.Time, force bool) {
	if !force && now.Sub(m.lastCut) < max(m.latency, m.slow) {
		return
	}
	m.window = max(m.window/2, 1)
	m.good, m.lastCut = 0, now
}

// classified logs the APF classification when it is new.
func (m *Monitor) classified(h http.Header) {
	fs, pl := h.Get(FlowSchemaHeader), h.Get(PriorityLevelHeader)
	if fs == "" || (fs == m.flowSchema && pl == m.priorityLevel) {
		return
	}
	m.flowSchema, m.priorityLevel = fs, pl
	m.log.Info("API Priority and Fairness classifies the operator's requests (kubectl get flowschemas,prioritylevelconfigurations -o wide shows the UIDs)",
		"flowSchemaUID", fs, "priorityLevelUID", pl)
}

// retryAfter is a 429's Retry-After in seconds, as the API server writes
// it, or defaultRetryAfter.
func retryAfter(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return defaultRetryAfter
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Busy: the server asked for a wait that has not ended (429 with
// Retry-After), or its writes of the last staleAfter answer slower than
// slow on average.
func (m *Monitor) Busy() bool {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	return now.Before(m.retryUntil) || (m.samples >= minSamples && m.latency > m.slow && now.Sub(m.lastSample) < staleAfter)
}

// Window is how many writes a sync may send at once now.
func (m *Monitor) Window() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.window
}

// Stats is what the Monitor knows, for metrics.
type Stats struct {
	Latency   time.Duration
	Throttled int64
	Window    int
	Busy      bool
}

// Stats returns the Monitor's state now.
func (m *Monitor) Stats() Stats {
	busy := m.Busy()
	m.mu.Lock()
	defer m.mu.Unlock()
	return Stats{Latency: m.latency, Throttled: m.throttled, Window: m.window, Busy: busy}
}
