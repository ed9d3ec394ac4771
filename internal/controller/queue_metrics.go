package controller

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// queueMetrics is the controller queue's metrics provider: the workqueue_*
// series every controller-runtime controller reports, in the same metric
// families, but its depth in one series instead of one per priority.
//
// controller-runtime's priority queue labels workqueue_depth with each
// priority an item was ready at and keeps every such series for good. The
// order's priorities are the milliseconds of a virtual time that only grows
// (order.go), so an operator that runs for weeks would gather a series for
// every few milliseconds of work it served: its memory and every scrape of
// /metrics would grow without bound. A provider without the depth by
// priority makes the queue report its depth as a queue without priorities
// does, with priority "".
//
// The families are controller-runtime's own, found in its registry by
// registering the same definitions (queueFamily); queue_metrics_test.go
// fails if a controller-runtime upgrade changes them.
type queueMetrics struct{}

var _ workqueue.MetricsProvider = queueMetrics{}

// The families' subsystem and labels, as controller-runtime names them.
const (
	queueSubsystem  = "workqueue"
	queueLabel      = "name"
	controllerLabel = "controller"
)

var queueLabels = []string{queueLabel, controllerLabel}

var (
	queueDepth = queueFamily(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: queueSubsystem, Name: "depth",
		Help: "Current depth of workqueue by workqueue and priority",
	}, []string{queueLabel, controllerLabel, "priority"}))
	queueAdds = queueFamily(prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: queueSubsystem, Name: "adds_total",
		Help: "Total number of adds handled by workqueue",
	}, queueLabels))
	queueLatency      = queueHistogram("queue_duration_seconds", "How long in seconds an item stays in workqueue before being requested")
	queueWorkDuration = queueHistogram("work_duration_seconds", "How long in seconds processing an item from workqueue takes.")
	queueUnfinished   = queueFamily(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: queueSubsystem, Name: "unfinished_work_seconds",
		Help: "How many seconds of work has been done that " +
			"is in progress and hasn't been observed by work_duration. Large " +
			"values indicate stuck threads. One can deduce the number of stuck " +
			"threads by observing the rate at which this increases.",
	}, queueLabels))
	queueLongestRunning = queueFamily(prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Subsystem: queueSubsystem, Name: "longest_running_processor_seconds",
		Help: "How many seconds has the longest running " +
			"processor for workqueue been running.",
	}, queueLabels))
	queueRetries = queueFamily(prometheus.NewCounterVec(prometheus.CounterOpts{
		Subsystem: queueSubsystem, Name: "retries_total",
		Help: "Total number of items added to the workqueue with a non-zero delay (rate-limited requeues, explicit RequeueAfter or AddAfter calls)",
	}, queueLabels))
)

// queueHistogram is one of the two histogram families, which differ only
// in name and help.
func queueHistogram(name, help string) *prometheus.HistogramVec {
	return queueFamily(prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: queueSubsystem, Name: name, Help: help,
		Buckets:                         prometheus.ExponentialBuckets(10e-9, 10, 12),
		NativeHistogramBucketFactor:     1.1,
		NativeHistogramMaxBucketNumber:  100,
		NativeHistogramMinResetDuration: time.Hour,
	}, queueLabels))
}

// queueFamily is the metric family registered already under c's definition
// (controller-runtime's), or c, registered now, where there is none. A
// family of the same name but another definition leaves c unregistered:
// the test of this file reports it.
func queueFamily[C prometheus.Collector](c C) C {
	err := metrics.Registry.Register(c)
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	return c
}

func (queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return queueDepth.WithLabelValues(name, name, "")
}

func (queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return queueAdds.WithLabelValues(name, name)
}

func (queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return queueLatency.WithLabelValues(name, name)
}

func (queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return queueWorkDuration.WithLabelValues(name, name)
}

func (queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueUnfinished.WithLabelValues(name, name)
}

func (queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return queueLongestRunning.WithLabelValues(name, name)
}

func (queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return queueRetries.WithLabelValues(name, name)
}
