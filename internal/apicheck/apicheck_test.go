package apicheck

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	testingclock "k8s.io/utils/clock/testing"
)

// An outage is reported once it has lasted Grace: readiness fails with its
// length and the last error, the log says when it started and when it
// ended; a single failed probe is not an outage.
func TestCheckerReportsAnOutageAndTheRecovery(t *testing.T) {
	var ready atomic.Bool
	ready.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			t.Errorf("probe of %s, want /readyz", r.URL.Path)
		}
		if !ready.Load() {
			http.Error(w, "etcd not ready", http.StatusInternalServerError)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	d, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	var logs []string
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := &Checker{Client: d.RESTClient(), Interval: time.Second, Grace: 10 * time.Second, Clock: clk,
		Log: funcr.New(func(prefix, args string) { logs = append(logs, args) }, funcr.Options{})}
	ctx := context.Background()
	step := func(d time.Duration) {
		clk.SetTime(clk.Now().Add(d))
		c.Probe(ctx)
	}

	step(0)
	if err := c.Check(nil); err != nil {
		t.Fatalf("ready server: %v", err)
	}
	ready.Store(false)
	step(time.Second)
	if err := c.Check(nil); err != nil {
		t.Errorf("one failed probe already reported: %v", err)
	}
	ready.Store(true)
	step(time.Second)
	ready.Store(false)
	for range 11 {
		step(time.Second)
	}
	err = c.Check(nil)
	if err == nil || !strings.Contains(err.Error(), "has not answered for 10s") || !strings.Contains(err.Error(), "etcd not ready") {
		t.Errorf("Check during an outage = %v, want its length and the last error", err)
	}
	ready.Store(true)
	step(5 * time.Second)
	if err := c.Check(nil); err != nil {
		t.Errorf("Check after the recovery: %v", err)
	}
	if len(logs) != 2 || !strings.Contains(logs[0], "does not answer") || !strings.Contains(logs[1], `"unreachableFor"="15s"`) {
		t.Errorf("log lines %q, want the outage's start and its end after 15s", logs)
	}
}

// While requests through a wrapped transport are answered, they stand in
// for the probes: none is sent. Once they stop, or only get server errors,
// the probes resume and an outage is reported as before.
func TestAnsweredRequestsStandInForProbes(t *testing.T) {
	var probes atomic.Int32
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/readyz" {
			probes.Add(1)
		}
		if down.Load() {
			http.Error(w, "etcd not ready", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	clk := testingclock.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	probeClient, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c := &Checker{Client: probeClient.RESTClient(), Interval: 2 * time.Second, Grace: 10 * time.Second, Clock: clk, Log: logr.Discard()}
	work := &http.Client{Transport: c.WrapTransport(http.DefaultTransport)}
	request := func() {
		resp, err := work.Get(srv.URL + "/api/v1/pods")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
	}
	ctx := context.Background()
	// busy: for n seconds, a request each second, then the check's probe.
	busy := func(n int) {
		for range n {
			request()
			clk.SetTime(clk.Now().Add(time.Second))
			c.Probe(ctx)
		}
	}

	busy(10)
	if n := probes.Load(); n != 0 {
		t.Errorf("%d probes sent while the controller's requests were answered, want 0", n)
	}
	if err := c.Check(nil); err != nil {
		t.Errorf("Check while answered: %v", err)
	}

	// Nothing sent for longer than the Interval: the probe asks.
	clk.SetTime(clk.Now().Add(3 * time.Second))
	c.Probe(ctx)
	if n := probes.Load(); n != 1 {
		t.Errorf("%d probes after an idle Interval, want 1", n)
	}

	// Server errors are no answer: the probes go on and see the outage.
	down.Store(true)
	busy(12)
	if n := probes.Load(); n != 13 {
		t.Errorf("%d probes while the server failed every request, want 13", n)
	}
	if err := c.Check(nil); err == nil || !strings.Contains(err.Error(), "has not answered for 11s") {
		t.Errorf("Check during an outage seen only by probes = %v, want the outage", err)
	}
}
