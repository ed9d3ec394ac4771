// Command manager runs the IndexedBatchJob operator.
package main

import (
	"crypto/tls"
	"errors"
	"flag"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/apicheck"
	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/metricsauth"
	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

var (
	scheme   = runtime.NewScheme()
	setupLog = ctrl.Log.WithName("setup")
)

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ibjv1.AddToScheme(scheme))
	utilruntime.Must(ibjkueue.AddToScheme(scheme))
}

// gcPercent is the garbage collector's GOGC unless the environment sets
// one: the heap may grow to 1.7 times what is live before a collection,
// not 2 times. The operator allocates little per pod (its pod watch is
// decoded in place, its writes' answers are not kept), so the extra
// collections cost little CPU and the peak resident set is lower
// (docs/bench/README.md).
const gcPercent = 70

func main() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	var (
		metricsAddr, probeAddr, pprofAddr, namespaces    string
		leaderElectionNamespace                          string
		enableLeaderElection, secureMetrics, enableHTTP2 bool
		qps                                              float64
		burst, maxConcurrent                             int
		backoffBase, backoffMax, throttleTick            time.Duration
		leaseDuration, renewDeadline, retryPeriod        time.Duration
		wh                                               webhookFlags
		kq                                               kueueFlags
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", "0", "The address the metrics endpoint binds to. "+
		"Use :8443 for HTTPS or :8080 for HTTP, or leave as 0 to disable the metrics service.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "The address the probe endpoint binds to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "The address pprof binds to; empty disables it.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false,
		"Enable leader election for controller manager. Ensures there is only one active controller manager.")
	flag.StringVar(&leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election lease; empty means the pod's own namespace, which only works in-cluster.")
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second,
		"How long a standby waits after the last renewal before it takes over a lease whose leader died.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second,
		"How long the leader keeps retrying to renew its lease before it gives up leading (and exits).")
	flag.DurationVar(&retryPeriod, "leader-elect-retry-period", 2*time.Second,
		"How often leaders renew and standbys try to acquire the lease.")
	flag.BoolVar(&secureMetrics, "metrics-secure", true,
		"If set, the metrics endpoint is served securely via HTTPS, with authentication and authorization.")
	flag.BoolVar(&enableHTTP2, "enable-http2", false,
		"If set, HTTP/2 will be enabled for the metrics server.")
	flag.Float64Var(&qps, "kube-api-qps", 50, "Queries per second the client may send to the API server.")
	flag.IntVar(&burst, "kube-api-burst", 100, "Burst of queries the client may send to the API server.")
	flag.DurationVar(&throttleTick, "kube-api-throttle-tick", 250*time.Millisecond,
		"Requests held back by --kube-api-qps are released together on this tick (0: each as soon as its token is due).")
	flag.IntVar(&maxConcurrent, "max-concurrent-reconciles", 5, "How many IndexedBatchJobs are synced at once.")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch; empty watches all.")
	flag.DurationVar(&backoffBase, "pod-failure-backoff", jobpod.DefaultBackoff.Base,
		"Delay before the first replacement of a failed pod; it doubles with each further failure.")
	flag.DurationVar(&backoffMax, "pod-failure-backoff-max", jobpod.DefaultBackoff.Max,
		"Cap of the replacement delay.")
	kq.bind(flag.CommandLine)
	wh.bind(flag.CommandLine)
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))

	// HTTP/2 stays off unless asked for (CVE-2023-44487 and CVE-2023-39325).
	var tlsOpts []func(*tls.Config)
	if !enableHTTP2 {
		tlsOpts = append(tlsOpts, func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} })
	}
	metricsOpts := metricsserver.Options{
		BindAddress:   metricsAddr,
		SecureServing: secureMetrics,
		TLSOpts:       tlsOpts,
	}
	if secureMetrics {
		// controller-runtime's filters.WithAuthenticationAndAuthorization,
		// without the k8s.io/apiserver it links (why: internal/metricsauth's
		// package doc and docs/bench/library-choices.md).
		metricsOpts.FilterProvider = metricsauth.WithAuthenticationAndAuthorization
	}

	var watched []string
	for _, ns := range strings.Split(namespaces, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			watched = append(watched, ns)
		}
	}

	if qps <= 0 || burst < 1 || throttleTick < 0 {
		setupLog.Error(nil,
			"--kube-api-qps must be above 0, --kube-api-burst at least 1 and --kube-api-throttle-tick not negative",
			"qps", qps, "burst", burst, "throttleTick", throttleTick)
		os.Exit(1)
	}
	if _, err := kq.settings(); err != nil {
		setupLog.Error(err, "Invalid Kueue setting")
		os.Exit(1)
	}
	cfg := uncompressed(ctrl.GetConfigOrDie())
	// The webhook's dry runs get a client of their own (rate limit
	// included), so that admission never waits behind the controller's pod
	// creates at --kube-api-qps.
	dryRunCfg := rest.CopyConfig(cfg)
	dryRunCfg.QPS, dryRunCfg.Burst = 20, 40
	// The leader lease too: its renewals never wait behind pod writes, so
	// no --kube-api-qps or --max-concurrent-reconciles loses it under load.
	leaseCfg := rest.CopyConfig(cfg)
	leaseCfg.QPS, leaseCfg.Burst = 5, 10
	cfg.QPS = float32(qps)
	cfg.Burst = burst
	// One token bucket for every client of the process (controller-runtime
	// otherwise gives each resource's client a bucket of its own), so that
	// --kube-api-qps bounds all the operator sends, as it does for
	// kube-controller-manager's clients. Requests it holds back leave
	// together on a tick, which costs less CPU than one every 1/QPS seconds
	// (docs/bench/library-choices.md).
	cfg.RateLimiter = throttle.New(float32(qps), burst, throttleTick)
	api, err := apiChecker(cfg)
	if err != nil {
		setupLog.Error(err, "Unable to set up the kube-apiserver check")
		os.Exit(1)
	}
	// The controller's answered requests stand in for the checker's probes.
	cfg.Wrap(api.WrapTransport)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsOpts,
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "indexedbatchjob.batch.indexedjob.dev",
		LeaderElectionConfig:   leaseCfg,
		// Out of cluster (for example `make run` with --leader-elect) there
		// is no service account namespace to default to.
		LeaderElectionNamespace: leaderElectionNamespace,
		// The process exits right after it stops leading, so releasing the
		// lease at once is safe and lets a standby take over without waiting.
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &leaseDuration,
		RenewDeadline:                 &renewDeadline,
		RetryPeriod:                   &retryPeriod,
		Cache:                         controller.CacheOptions(watched),
	})
	if err != nil {
		setupLog.Error(err, "Unable to start manager")
		os.Exit(1)
	}

	clientset, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		setupLog.Error(err, "Unable to create the events client")
		os.Exit(1)
	}
	recorder, stopRecorder := controller.NewEventRecorder(clientset, scheme, "indexedbatchjob-controller")
	r := controller.NewReconciler(mgr.GetClient(), recorder,
		clock.RealClock{}, controller.Backoff{Base: backoffBase, Max: backoffMax})
	if err := r.SetupWithManager(mgr, watched, maxConcurrent); err != nil {
		setupLog.Error(err, "Unable to create controller", "controller", "IndexedBatchJob")
		os.Exit(1)
	}
	queue, err := setupKueue(mgr, kq)
	if err != nil {
		setupLog.Error(err, "Unable to set up the Kueue integration")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "Unable to set up health check")
		os.Exit(1)
	}
	readyz := healthz.Ping
	if wh.enabled {
		srv, err := setupWebhook(mgr, dryRunCfg, wh, tlsOpts, queue)
		if err != nil {
			setupLog.Error(err, "Unable to set up the webhook")
			os.Exit(1)
		}
		// Ready once the certificates are ready and the webhook serves,
		// so that a rollout waits for a replica that can admit jobs.
		readyz = srv.StartedChecker()
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		setupLog.Error(err, "Unable to set up ready check")
		os.Exit(1)
	}
	if err := errors.Join(mgr.Add(api), mgr.AddReadyzCheck("kube-apiserver", api.Check)); err != nil {
		setupLog.Error(err, "Unable to set up the kube-apiserver check")
		os.Exit(1)
	}

	setupLog.Info("Starting manager", "qps", qps, "burst", burst, "maxConcurrentReconciles", maxConcurrent)
	err = mgr.Start(ctrl.SetupSignalHandler())
	stopRecorder()
	if err != nil {
		setupLog.Error(err, "Problem running manager")
		os.Exit(1)
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
