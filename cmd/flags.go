package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/serverload"
)

// options are the manager's command-line flags, all bound by bindFlags.
type options struct {
	metricsAddr, probeAddr, pprofAddr string
	secureMetrics, enableHTTP2        bool

	enableLeaderElection                      bool
	leaderElectionNamespace                   string
	leaseDuration, renewDeadline, retryPeriod time.Duration

	qps          float64
	burst        int
	throttleTick time.Duration
	busyLatency  time.Duration

	maxConcurrent           int
	namespaces              string
	backoffBase, backoffMax time.Duration
	finalizerHold           time.Duration

	kueue   kueueFlags
	webhook webhookFlags
	zap     zap.Options
}

// bindFlags binds every flag of the manager to o on fs.
func (o *options) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "The address pprof binds to; empty disables it.")
	fs.BoolVar(&o.enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. Ensures there is only one active controller manager.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election lease; empty means the pod's own namespace, which only works in-cluster.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a standby waits after the last renewal before it takes over a lease whose leader died.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps retrying to renew its lease before it gives up leading (and exits).")
	fs.DurationVar(&o.retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often leaders renew and standbys try to acquire the lease.")
	fs.BoolVar(&o.secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS, with authentication and authorization.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics server.")
	fs.Float64Var(&o.qps, "kube-api-qps", 50, "Queries per second the client may send to the API server.")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "Burst of queries the client may send to the API server.")
	fs.DurationVar(&o.throttleTick, "kube-api-throttle-tick", 250*time.Millisecond,
		"Requests held back by --kube-api-qps are released together on this tick (0: each as soon as its token is due).")
	fs.DurationVar(&o.busyLatency, "api-busy-latency", serverload.DefaultSlow,
		"Average write latency above which the API server counts as busy: creates go in smaller batches and work "+
			"that may wait (finalizers of counted pods, events, counter-only status writes) yields; "+
			"a 429 counts as busy for its Retry-After. 0 turns this off.")
	fs.IntVar(&o.maxConcurrent, "max-concurrent-reconciles", 5, "How many IndexedBatchJobs are synced at once.")
	fs.StringVar(&o.namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all.")
	fs.DurationVar(&o.backoffBase, "pod-failure-backoff", jobpod.DefaultBackoff.Base,
		"Delay before the first replacement of a failed pod; it doubles with each further failure.")
	fs.DurationVar(&o.backoffMax, "pod-failure-backoff-max", jobpod.DefaultBackoff.Max,
		"Cap of the replacement delay.")
	fs.DurationVar(&o.finalizerHold, "counted-finalizer-hold", controller.DefaultReleaseBound,
		"How long the tracking finalizer of a pod whose result is counted may wait for the client's spare budget "+
			"before its removal shares the budget with new work, a token each in turn (0 to 1h). "+
			"A pod being deleted is let go at once.")
	o.kueue.bind(fs)
	o.webhook.bind(fs)
	o.zap.BindFlags(fs)
}

// maxFinalizerHold is the longest --counted-finalizer-hold.
const maxFinalizerHold = time.Hour

// validate says which flags hold a value the manager cannot run with: a
// client rate limit that never lets a request through, or a finalizer
// hold out of its range.
func (o *options) validate() error {
	var errs []error
	if o.qps <= 0 || o.burst < 1 || o.throttleTick < 0 || o.busyLatency < 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be above 0, --kube-api-burst at least 1, "+
			"--kube-api-throttle-tick and --api-busy-latency not negative (got %v, %d, %v, %v)",
			o.qps, o.burst, o.throttleTick, o.busyLatency))
	}
	if o.finalizerHold < 0 || o.finalizerHold > maxFinalizerHold {
		errs = append(errs, fmt.Errorf("--counted-finalizer-hold must be between 0s and %v (got %v)",
			maxFinalizerHold, o.finalizerHold))
	}
	return errors.Join(errs...)
}

// watchedNamespaces are the namespaces of --namespaces, nil for all.
func (o *options) watchedNamespaces() []string {
	var watched []string
	for _, ns := range strings.Split(o.namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			watched = append(watched, ns)
		}
	}
	return watched
}
