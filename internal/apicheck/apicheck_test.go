package apicheck

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
