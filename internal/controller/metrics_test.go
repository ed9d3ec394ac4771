package controller

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// gatherTracked reads the tracked-entries gauge through a registry, as a
// scrape of the metrics endpoint would.
func gatherTracked(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			out[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// The tracked-entries gauge reports each per-job store as it fills and
// goes back to zero once the jobs are forgotten: what the soak test reads
// from a running operator.
func TestTrackedEntries(t *testing.T) {
	r := NewReconciler(nil, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	collector := &trackedCollector{}
	collector.add(r)
	now := time.Now()
	key := k8stypes.NamespacedName{Namespace: "ns", Name: "a"}

	r.jobs.seen(key, "job-a")
	r.jobs.expectCreate("job-a", "a-0", now)
	r.jobs.expectCreate("job-a", "a-1", now)
	r.jobs.expectCreate("job-b", "b-0", now)
	pod := &jobpod.Pod{Tracked: true}
	pod.Name, pod.Namespace, pod.UID = "a-0", "ns", "pod-a-0"
	r.later.add("job-a", []*jobpod.Pod{pod})
	r.strays.add(pod)
	r.jobs.takeService("job-b", "b", now)
	r.jobs.gangGiven("job-a", gangOf(4), now)
	r.memoryCaps.Set("ns", (*jobpod.MemoryCap)(nil), time.Minute)
	r.jobs.pacedEvents("job-a", "a", &plan{}, 2, now)
	r.jobs.takeName("job-b", 0, 0)
	jobA := harness.MakeIndexedBatchJob("a", "ns").UID("job-a").Obj()
	r.jobs.observeGone(jobA, []*jobpod.Pod{makePod(jobA, 0).failedAt(now, 1).deletedAt(now).obj()})

	full := map[string]float64{"job_states": 2, "expected_creates": 3, "expected_finalizers": 0,
		"job_uids": 1, "finalizer_releases": 1, "taken_services": 1, "gangs": 1, "paced_events": 1, "taken_pod_names": 1, "gone_pods": 1, "stray_pods": 1, "memory_caps": 1}
	if diff := cmp.Diff(full, gatherTracked(t, collector)); diff != "" {
		t.Errorf("entries with two jobs (-want +got):\n%s", diff)
	}

	r.jobs.gone(key)
	r.jobs.forget("job-b")
	r.later.observed(pod)
	r.later.drain(context.Background())
	stray, _ := r.strays.queue.Get()
	r.strays.queue.Forget(stray)
	r.strays.queue.Done(stray)
	r.memoryCaps.Delete("ns")
	empty := map[string]float64{"job_states": 0, "expected_creates": 0, "expected_finalizers": 0,
		"job_uids": 0, "finalizer_releases": 0, "taken_services": 0, "gangs": 0, "paced_events": 0, "taken_pod_names": 0, "gone_pods": 0, "stray_pods": 0, "memory_caps": 0}
	if diff := cmp.Diff(empty, gatherTracked(t, collector)); diff != "" {
		t.Errorf("entries once the jobs are forgotten (-want +got):\n%s", diff)
	}

	// A reconciler whose manager stopped is no longer reported.
	r.jobs.seen(k8stypes.NamespacedName{Namespace: "ns", Name: "c"}, "job-c")
	collector.remove(r)
	if got := gatherTracked(t, collector); len(got) != 0 {
		t.Errorf("entries of a removed reconciler: %v, want none", got)
	}
}

// A rule's name is in the job's condition reason, never in a metric label:
// the names users give their rules would make the label's values
// unbounded.
func TestMetricReasonFoldsRuleNamesIntoPodFailurePolicy(t *testing.T) {
	for reason, want := range map[string]string{
		"PodFailurePolicy_bad_input": "PodFailurePolicy",
		"PodFailurePolicy":           "PodFailurePolicy",
		"BackoffLimitExceeded":       "BackoffLimitExceeded",
		"job suspended":              "job suspended",
	} {
		if got := metricReason(reason); got != want {
			t.Errorf("metricReason(%q) = %q, want %q", reason, got, want)
		}
	}
}

// A restart the status records is counted once, with the status write
// that makes it.
func TestRestartIsCountedWithItsStatus(t *testing.T) {
	job := restartingJob(2, "")
	before := testutil.ToFloat64(restarts)
	p := plan{}
	p.status.Restarts = 1
	recordMetrics(context.Background(), job, p)
	job.Status.Restarts = 1
	recordMetrics(context.Background(), job, p) // the next sync: no new restart
	if got := testutil.ToFloat64(restarts) - before; got != 1 {
		t.Errorf("indexedbatchjob_restarts_total grew by %v, want 1", got)
	}
}
