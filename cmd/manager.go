package main

import (
	"crypto/tls"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/indexed-batch-job/indexed-batch-job/internal/apicheck"
	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	"github.com/indexed-batch-job/indexed-batch-job/internal/metricsauth"
	"github.com/indexed-batch-job/indexed-batch-job/internal/serverload"
	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

// restConfigs are the configs of the process's clients, each with a rate
// limit of its own.
type restConfigs struct {
	// manager is the controller's, the events' and the cache's, limited
	// by --kube-api-qps and --kube-api-burst.
	manager *rest.Config
	// dryRun is the webhook's: its dry runs never wait behind the
	// controller's pod creates at --kube-api-qps.
	dryRun *rest.Config
	// lease is the leader lease's: its renewals never wait behind pod
	// writes, so no --kube-api-qps or --max-concurrent-reconciles loses it
	// under load.
	lease *rest.Config
	// load follows how busy the API server is from the manager's writes
	// (nil with --api-busy-latency=0).
	load *serverload.Monitor
}

// newRESTConfigs reads the kubeconfig (exiting when there is none) and
// derives the process's client configs from it.
func newRESTConfigs(o *options) restConfigs {
	cfg := uncompressed(ctrl.GetConfigOrDie())
	dryRun := rest.CopyConfig(cfg)
	dryRun.QPS, dryRun.Burst = 20, 40
	lease := rest.CopyConfig(cfg)
	lease.QPS, lease.Burst = 5, 10
	cfg.QPS = float32(o.qps)
	cfg.Burst = o.burst
	// One token bucket for every client of the process (controller-runtime
	// otherwise gives each resource's client a bucket of its own), so that
	// --kube-api-qps bounds all the operator sends, as it does for
	// kube-controller-manager's clients. Requests it holds back leave
	// together on a tick, which costs less CPU than one every 1/QPS seconds
	// (docs/bench/library-choices.md).
	limiter := throttle.New(float32(o.qps), o.burst, o.throttleTick)
	cfg.RateLimiter = limiter
	cfgs := restConfigs{manager: cfg, dryRun: dryRun, lease: lease}
	if o.busyLatency > 0 {
		cfgs.load = serverload.New(clock.RealClock{}, o.busyLatency, controller.MaxWritesPerSync,
			ctrl.Log.WithName("serverload"))
		cfg.Wrap(cfgs.load.WrapTransport)
		limiter.SetServerBusy(cfgs.load.Busy)
	}
	return cfgs
}

// tlsOptions keep HTTP/2 off unless asked for (CVE-2023-44487 and
// CVE-2023-39325), for the metrics and the webhook servers.
func tlsOptions(o *options) []func(*tls.Config) {
	var tlsOpts []func(*tls.Config)
	if !o.enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	return tlsOpts
}

// managerOptions are the manager's options from the flags, with lease as
// the leader lease's client config.
func managerOptions(o *options, lease *rest.Config, tlsOpts []func(*tls.Config)) ctrl.Options {
	metricsOpts := metricsserver.Options{
		BindAddress:   o.metricsAddr,
		SecureServing: o.secureMetrics,
		TLSOpts:       tlsOpts,
	}
	if o.secureMetrics {
		// controller-runtime's filters.WithAuthenticationAndAuthorization,
		// without the k8s.io/apiserver it links (why: internal/metricsauth's
		// package doc and docs/bench/library-choices.md).
		metricsOpts.FilterProvider = metricsauth.WithAuthenticationAndAuthorization
	}
	return ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         o.enableLeaderElection,
		LeaderElectionID:       "indexedbatchjob.batch.indexedjob.dev",
		LeaderElectionConfig:   lease,
		// Out of cluster (for example `make run` with --leader-elect) there
		// is no service account namespace to default to.
		LeaderElectionNamespace: o.leaderElectionNamespace,
		// The process exits right after it stops leading, so releasing the
		// lease at once is safe and lets a standby take over without waiting.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
		Cache:                         controller.CacheOptions(o.watchedNamespaces()),
	}
}

// uncompressed is cfg asking for its answers uncompressed, as every client
// of the process does. kube-apiserver gzips a watch that starts with a list
// (WatchListCompression, on by default from 1.37) one gzip member per
// event, so that the pod watch would pay a gzip header, a Huffman table and
// a checksum on every pod change, and the API server the compressing; the
// operator runs beside the API server, where bandwidth is cheap and CPU is
// not.
func uncompressed(cfg *rest.Config) *rest.Config {
	cfg.DisableCompression = true
	return cfg
}

// apiChecker probes kube-apiserver every 2 s on a client of its own (never
// held back by --kube-api-qps) unless the operator's own requests were
// answered meanwhile, and fails readiness once it has not answered for
// 10 s, logging when an outage starts and ends.
func apiChecker(cfg *rest.Config) (*apicheck.Checker, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.RateLimiter, cfg.QPS, cfg.Burst = nil, 5, 10
	cfg.Timeout = 2 * time.Second
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &apicheck.Checker{Client: d.RESTClient(), Interval: 2 * time.Second, Grace: 10 * time.Second,
		Log: ctrl.Log.WithName("kube-apiserver"), Clock: clock.RealClock{}}, nil
}
