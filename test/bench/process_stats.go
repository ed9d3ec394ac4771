package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"math"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// cpuSeconds is utime+stime of a process, from /proc/<pid>/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	// Fields after the command name (which may contain spaces) start after ')'.
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// f[0] is field 3 (state); utime is field 14, stime field 15.
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat", pid)
	}
	return (ut + st) / 100, nil // USER_HZ is 100 on Linux
}

// peakRSSMiB is VmHWM of a process: its peak resident set, including the
// pages of its binary that are mapped in.
func peakRSSMiB(pid int) (float64, error) { return statusMiB(pid, "VmHWM:") }

// rssMiB is VmRSS of a process now: its resident set, the binary's mapped
// pages included.
func rssMiB(pid int) (float64, error) { return statusMiB(pid, "VmRSS:") }

// anonRSSMiB is RssAnon of a process now: its resident memory without the
// binary's mapped pages (heap, stacks, runtime).
func anonRSSMiB(pid int) (float64, error) { return statusMiB(pid, "RssAnon:") }

func statusMiB(pid int, field string) (float64, error) {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s for %d", field, pid)
}

var metricsClient = &http.Client{
	Timeout:   10 * time.Second,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // local benchmark
}

// restRequests sums rest_client_requests_total scraped from url.
func restRequests(url string) (float64, error) {
	resp, err := metricsClient.Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		return 0, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	return harness.SumSeries(resp.Body, "rest_client_requests_total")
}

// The operator's histograms of how long counted pods kept their
// finalizers: from the pod's end, and from the status write that counted it.
const (
	holdMetric = "indexedbatchjob_counted_finalizer_hold_seconds"
	waitMetric = "indexedbatchjob_counted_finalizer_release_wait_seconds"
)

// finalizerHoldBound reads, from the operator's metrics text, the upper
// bound of the lowest bucket of the histogram name (holdMetric,
// waitMetric) that holds every observation: no counted pod kept its
// finalizer longer in the background. 0 without observations; when some
// went past the highest finite bucket, that bucket's bound negated ("more
// than it": a number JSON can hold, where +Inf is none).
func finalizerHoldBound(metricsText, name string) float64 {
	var total float64
	type bucket struct{ le, n float64 }
	var buckets []bucket
	for line := range strings.Lines(metricsText) {
		line = strings.TrimSpace(line)
		value := func() float64 {
			v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			return v
		}
		switch {
		case strings.HasPrefix(line, name+"_count "):
			total = value()
		case strings.HasPrefix(line, name+`_bucket{le="`):
			le, _, _ := strings.Cut(strings.TrimPrefix(line, name+`_bucket{le="`), `"`)
			bound, err := strconv.ParseFloat(le, 64)
			if err == nil {
				buckets = append(buckets, bucket{bound, value()})
			}
		}
	}
	if total == 0 {
		return 0
	}
	highest := 0.0
	for _, b := range buckets { // the text lists them by le, increasing
		if math.IsInf(b.le, 1) {
			break
		}
		if b.n >= total {
			return b.le
		}
		highest = b.le
	}
	return -highest
}

// serverLoad is what kube-apiserver and etcd did: their CPU seconds, the
// requests kube-apiserver finished (apiserver_request_total, every user),
// the writes among them, and the requests API Priority and Fairness
// dispatched by priority level and rejected (429).
type serverLoad struct {
	APIServerCPU float64            `json:",omitempty"`
	EtcdCPU      float64            `json:",omitempty"`
	Requests     float64            `json:",omitempty"`
	Writes       float64            `json:",omitempty"`
	Dispatched   map[string]float64 `json:",omitempty"`
	Rejected     float64            `json:",omitempty"`
}

// writeVerbs are apiserver_request_total's verbs that change an object.
var writeVerbs = []string{"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}

// serverLoad reads kube-apiserver's and etcd's CPU and kube-apiserver's
// request counters now; zero where unreadable.
func (b *bench) serverLoad(ctx context.Context) serverLoad {
	var l serverLoad
	l.APIServerCPU, _ = cpuSeconds(b.cp.APIServerPid())
	l.EtcdCPU, _ = cpuSeconds(b.cp.EtcdPid())
	if text, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx); err == nil {
		l.count(string(text))
	}
	return l
}

// count sets the request counters from kube-apiserver's metrics text.
func (l *serverLoad) count(text string) {
	l.Dispatched = map[string]float64{}
	for line := range strings.Lines(text) {
		line = strings.TrimSpace(line)
		labels, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			if labels, ok = strings.CutPrefix(line, "apiserver_flowcontrol_dispatched_requests_total{"); ok {
				l.Dispatched[label(labels, "priority_level")] += lastValue(line)
			} else if strings.HasPrefix(line, "apiserver_flowcontrol_rejected_requests_total{") {
				l.Rejected += lastValue(line)
			}
			continue
		}
		v := lastValue(line)
		l.Requests += v
		if slices.Contains(writeVerbs, label(labels, "verb")) {
			l.Writes += v
		}
	}
}

// minus is the load between o and l.
func (l serverLoad) minus(o serverLoad) serverLoad {
	d := serverLoad{
		APIServerCPU: l.APIServerCPU - o.APIServerCPU, EtcdCPU: l.EtcdCPU - o.EtcdCPU,
		Requests: l.Requests - o.Requests, Writes: l.Writes - o.Writes, Rejected: l.Rejected - o.Rejected,
	}
	for pl, n := range l.Dispatched {
		if n -= o.Dispatched[pl]; n > 0 {
			if d.Dispatched == nil {
				d.Dispatched = map[string]float64{}
			}
			d.Dispatched[pl] = n
		}
	}
	return d
}

// label is the value of a label in a series' labels (`a="x",b="y"}`).
func label(labels, name string) string {
	_, v, ok := strings.Cut(","+labels, ","+name+`="`)
	if !ok {
		return ""
	}
	v, _, _ = strings.Cut(v, `"`)
	return v
}

// lastValue is the sample value of a metrics text line.
func lastValue(line string) float64 {
	v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
	return v
}
