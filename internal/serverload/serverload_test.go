package serverload

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	clocktesting "k8s.io/utils/clock/testing"
)

var start = time.Date(2026, time.December, 7, 12, 0, 0, 0, time.UTC)

func header(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// A 429 makes the server busy for its Retry-After and halves the window
// at once, every time.
func TestA429IsBusyForItsRetryAfter(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	m := New(clk, 0, 64, logr.Discard())
	m.Observe(http.StatusTooManyRequests, time.Millisecond, header("Retry-After", "3"))
	if !m.Busy() || m.Window() != 32 {
		t.Fatalf("after a 429: busy %v, window %d; want busy, 32", m.Busy(), m.Window())
	}
	m.Observe(http.StatusTooManyRequests, time.Millisecond, header())
	if m.Window() != 16 {
		t.Errorf("after a second 429: window %d, want 16", m.Window())
	}
	clk.Step(2900 * time.Millisecond)
	if !m.Busy() {
		t.Error("not busy before the Retry-After ended")
	}
	clk.Step(200 * time.Millisecond)
	if m.Busy() {
		t.Error("still busy after the Retry-After ended")
	}
	if s := m.Stats(); s.Throttled != 2 {
		t.Errorf("throttled %d, want 2", s.Throttled)
	}
}

// Slow writes make the server busy once there are enough of them, and
// cut the window at most once per latency; fast ones bring it back, one
// write more per window of good answers.
func TestSlowWritesCutTheWindowAndFastOnesGrowIt(t *testing.T) {
	clk := clocktesting.NewFakeClock(start)
	m := New(clk, 100*time.Millisecond, 8, logr.Discard())
	for range minSamples - 1 {
		m.Observe(http.StatusCreated, time.Second, header())
	}
	if m.Busy() {
		t.Fatal("busy on fewer than minSamples writes")
	}
	if m.Window() != 4 {
		t.Errorf("window %d after slow writes within one latency, want one cut to 4", m.Window())
	}
	m.Observe(http.StatusCreated, time.Second, header())
	if !m.Busy() {
		t.Fatal("not busy after minSamples writes of 1 s")
	}
	clk.Step(time.Second + time.Millisecond)
	m.Observe(http.StatusCreated, time.Second, header())
	if m.Window() != 2 {
		t.Errorf("window %d after a slow write a latency later, want 2", m.Window())
	}
	// Without a write for staleAfter, the average is stale: not busy, so
	// that a background waiting on it tries again.
	clk.Step(staleAfter)
	if m.Busy() {
		t.Error("busy on a latency average older than staleAfter")
	}
	// Fast writes: the average falls under slow, and each window of good
	// answers adds one.
	for range 40 {
		m.Observe(http.StatusCreated, 5*time.Millisecond, header())
	}
	if m.Busy() {
		t.Errorf("busy after 40 fast writes (average %v)", m.Stats().Latency)
	}
	if m.Window() != 8 {
		t.Errorf("window %d after 40 fast writes, want it back at 8", m.Window())
	}
}

// Only writes are timed, and APF's classification is logged once per
// change.
func TestTheTransportTimesWritesAndLogsTheClassification(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(FlowSchemaHeader, "fs-1")
		w.Header().Set(PriorityLevelHeader, "pl-1")
		if r.Method == http.MethodPost {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	var logged []string
	m := New(clocktesting.NewFakeClock(start), 0, 4, funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{}))
	c := &http.Client{Transport: m.WrapTransport(http.DefaultTransport)}
	resp, err := c.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if m.Busy() || len(logged) != 0 {
		t.Fatalf("a read was observed: busy %v, logged %q", m.Busy(), logged)
	}
	for range 2 {
		resp, err = c.Post(srv.URL, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	if !m.Busy() || m.Stats().Throttled != 2 {
		t.Errorf("after two 429s: busy %v, throttled %d", m.Busy(), m.Stats().Throttled)
	}
	if len(logged) != 1 || !strings.Contains(logged[0], `"flowSchemaUID"="fs-1"`) {
		t.Errorf("logged %q, want the classification once", logged)
	}
}
