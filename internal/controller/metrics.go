package controller

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Metrics modelled on the built-in Job controller's (job_sync_duration_seconds,
// job_pods_creation_total, job_pods_finished_total, jobs_finished_total,
// job_finished_indexes_total), registered in controller-runtime's registry so
// the manager's metrics endpoint serves them.
var (
	syncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "indexedbatchjob_sync_duration_seconds",
		Help:    "Time taken to sync an IndexedBatchJob, by result (success, error).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
	}, []string{"result"})
	podsCreated = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "indexedbatchjob_pods_creation_total",
		Help: "Pods created, by reason (new: first pod of an index; retry: replacement of a failed pod) and status (succeeded; failed: refused; mutated: created as admission changed it, and deleted).",
	}, []string{"reason", "status"}) //nolint:goconst // label names read best where they are declared
	podsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "indexedbatchjob_pods_finished_total",
		Help: "Finished pods recorded in job status, by result (succeeded, failed).",
	}, []string{"result"})
	jobsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "indexedbatchjob_jobs_finished_total",
		Help: "Jobs that reached Complete or Failed, by condition and reason.",
	}, []string{"condition", "reason"})
	finishedIndexes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "indexedbatchjob_finished_indexes_total",
		Help: "Indexes that finished, by status (succeeded, failed) and whether backoffLimitPerIndex is set.",
	}, []string{"status", "backoff_limit_per_index"})
	podsDeleted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "indexedbatchjob_pods_deleted_total",
		Help: "Pods deleted by the controller, by reason.",
	}, []string{"reason"})
	nodesAvoided = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "indexedbatchjob_nodes_avoided_total",
		Help: "Nodes that a job's pods came to avoid because spec.nodeAvoidance.failedIndexesPerNode of its indexes failed there, counted once per job and node.",
	})
	finalizerHold = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "indexedbatchjob_counted_finalizer_hold_seconds",
		Help:    "How long a counted pod kept its tracking finalizer after it ended, for the finalizers removed in the background (the wait for the status write that counts it, then indexedbatchjob_counted_finalizer_release_wait_seconds).",
		Buckets: holdBuckets,
	})
	finalizerReleaseWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "indexedbatchjob_counted_finalizer_release_wait_seconds",
		Help:    "How long a counted pod kept its tracking finalizer after the status write that counted it, for the finalizers removed in the background (at most --counted-finalizer-hold, then the time half the client's QPS takes for the overdue removals queued before it, and a turn of the client's queue).",
		Buckets: holdBuckets,
	})
	finalizerReleaseRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "indexedbatchjob_counted_finalizer_release_retries_total",
		Help: "Finalizer removals of counted pods sent in the background that failed and were queued again, after the controller's rate limiter's delay.",
	})
	restarts = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "indexedbatchjob_restarts_total",
		Help: "Restarts of a job's pods together that podFailurePolicy RestartJob rules made (batch/v1 has none).",
	})
)

func init() {
	metrics.Registry.MustRegister(syncDuration, podsCreated, podsFinished, jobsFinished, finishedIndexes, podsDeleted, restarts, nodesAvoided,
		finalizerHold, finalizerReleaseWait, finalizerReleaseRetries)
}

// holdBuckets are the buckets of the finalizer hold histograms: fine
// below a minute, and around the default bound (DefaultReleaseBound).
var holdBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 45, 60, 120, 180, 240, 300, 305, 315, 330, 360, 600, 1200}

// recordMetrics counts what a sync recorded: finished pods, finished
// indexes, a restart and the job's end.
func recordMetrics(ctx context.Context, job *ibjv1.IndexedBatchJob, p plan) {
	for _, f := range p.recorded {
		result := "failed"
		if f.succeeded {
			result = "succeeded"
		}
		podsFinished.WithLabelValues(result).Inc()
	}
	perIndex := strconv.FormatBool(job.Spec.BackoffLimitPerIndex != nil)
	if p.newlyCompleted > 0 {
		finishedIndexes.WithLabelValues("succeeded", perIndex).Add(float64(p.newlyCompleted))
	}
	if p.newlyFailedIndexes > 0 {
		finishedIndexes.WithLabelValues("failed", perIndex).Add(float64(p.newlyFailedIndexes))
	}
	nodesAvoided.Add(float64(len(p.nodesAvoided)))
	if n := p.status.Restarts - job.Status.Restarts; n > 0 {
		restarts.Add(float64(n))
	}
	if c := p.newlyFinished; c != nil {
		jobsFinished.WithLabelValues(c.Type, metricReason(c.Reason)).Inc()
		log.FromContext(ctx).Info("Job finished", "condition", c.Type, "reason", c.Reason)
	}
}

// metricReason is a reason as a metric label: PodFailurePolicy for every
// PodFailurePolicy_<name>, so that the names users give their rules never
// make the label's values unbounded (as KEP-4443 requires of upstream's
// jobs_finished_total).
func metricReason(reason string) string {
	if strings.HasPrefix(reason, ibjv1.ReasonPodFailurePolicy+"_") {
		return ibjv1.ReasonPodFailurePolicy
	}
	return reason
}

// trackedDesc describes the entries the operator keeps in memory per job
// or per pod, by store. Each must follow the jobs and pods that exist, not
// the ones that came and went: the soak test reads them to prove it.
var trackedDesc = prometheus.NewDesc("indexedbatchjob_controller_tracked_entries",
	"Entries the controller keeps in memory, by store: jobs with a state (job_states), "+
		"pod creates and finalizer removals not yet seen in the cache (expected_creates, expected_finalizers), "+
		"job names mapped to their UID (job_uids), jobs with paced events, taken pod names, gone pods, "+
		"a taken Service name or a gang's size remembered (paced_events, taken_pod_names, gone_pods, taken_services, gangs), "+
		"jobs ranked in the queue (job_order), pods queued for a finalizer removal (finalizer_releases) "+
		"or a stray's release (stray_pods), namespaces' memory caps (memory_caps), jobs with an uncounted failure (failing_jobs) "+
		"and pods cached (cached_pods).",
	[]string{"store"}, nil)

// trackedCollector reports the sizes of the stores of the reconcilers running
// in this process (one in the operator; tests may run more), summed.
type trackedCollector struct {
	mu          sync.Mutex
	reconcilers []*Reconciler
}

var tracked = &trackedCollector{}

func init() {
	metrics.Registry.MustRegister(tracked)
}

func (c *trackedCollector) add(r *Reconciler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconcilers = append(c.reconcilers, r)
}

func (c *trackedCollector) remove(r *Reconciler) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reconcilers = slices.DeleteFunc(c.reconcilers, func(x *Reconciler) bool { return x == r })
}

// Describe implements prometheus.Collector.
func (c *trackedCollector) Describe(ch chan<- *prometheus.Desc) { ch <- trackedDesc }

// Collect implements prometheus.Collector.
func (c *trackedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	sums := map[string]int{}
	for _, r := range c.reconcilers {
		for store, n := range r.trackedEntries() {
			sums[store] += n
		}
	}
	for store, n := range sums {
		ch <- prometheus.MustNewConstMetric(trackedDesc, prometheus.GaugeValue, float64(n), store)
	}
}

// trackedEntries are the sizes of the reconciler's stores, by store name.
func (r *Reconciler) trackedEntries() map[string]int {
	out := r.jobs.sizes()
	out["memory_caps"] = r.memoryCaps.Len()
	out["finalizer_releases"] = r.later.size()
	out["stray_pods"] = r.strays.size()
	if r.order != nil {
		out["job_order"] = r.order.len()
	}
	if r.pods != nil {
		out["cached_pods"] = r.pods.Len()
		out["failing_jobs"] = r.pods.FailingJobs()
	}
	return out
}
