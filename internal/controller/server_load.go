package controller

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/indexed-batch-job/indexed-batch-job/internal/serverload"
)

// The API server's load as the operator sees it (internal/serverload),
// served beside the controller's metrics: a busy server is why creates go
// in smaller batches, counters wait and counted pods keep their finalizer
// a little longer (up to laterReleases' bound).
var serverLoad atomic.Pointer[serverload.Monitor]

// busyStatusInterval is how long a status that only moved counters waits
// while the API server is busy, in place of statusCounterInterval: a
// counter a second later is worth less than the seat it takes.
const busyStatusInterval = 5 * statusCounterInterval

func registerServerLoadMetrics(m *serverload.Monitor) { serverLoad.Store(m) }

// stat reads the registered Monitor's stats; zero without one.
func stat(f func(serverload.Stats) float64) func() float64 {
	return func() float64 {
		m := serverLoad.Load()
		if m == nil {
			return 0
		}
		return f(m.Stats())
	}
}

func init() {
	metrics.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "indexedbatchjob_apiserver_write_latency_seconds",
			Help: "Moving average of the latency of the operator's writes (creates, patches, updates, deletes) to the kube-apiserver.",
		}, stat(func(s serverload.Stats) float64 { return s.Latency.Seconds() })),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "indexedbatchjob_apiserver_busy",
			Help: "1 while the kube-apiserver is busy (a 429's Retry-After, or writes slower than --api-busy-latency): work that may wait yields.",
		}, stat(func(s serverload.Stats) float64 {
			if s.Busy {
				return 1
			}
			return 0
		})),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "indexedbatchjob_apiserver_write_window",
			Help: "How many writes a sync may send at once now: halved on slow answers and 429s, grown by one per window of fast answers.",
		}, stat(func(s serverload.Stats) float64 { return float64(s.Window) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "indexedbatchjob_apiserver_throttled_total",
			Help: "The operator's writes the kube-apiserver answered 429 Too Many Requests (API Priority and Fairness queues full).",
		}, stat(func(s serverload.Stats) float64 { return float64(s.Throttled) })),
	)
}
