// Command manager runs the IndexedBatchJob operator.
package main

import (
	"flag"
	"os"
	"runtime/debug"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	_ "k8s.io/client-go/plugin/pkg/client/auth"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
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
	var o options
	o.bindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.zap)))
	if err := o.validate(); err != nil {
		fatal(err, "Invalid flags")
	}
	if _, err := o.kueue.settings(); err != nil {
		fatal(err, "Invalid Kueue setting")
	}

	cfgs := newRESTConfigs(&o)
	api, err := apiChecker(cfgs.manager)
	if err != nil {
		fatal(err, "Unable to set up the kube-apiserver check")
	}
	// The controller's answered requests stand in for the checker's probes.
	cfgs.manager.Wrap(api.WrapTransport)
	tlsOpts := tlsOptions(&o)
	mgr, err := ctrl.NewManager(cfgs.manager, managerOptions(&o, cfgs.lease, tlsOpts))
	if err != nil {
		fatal(err, "Unable to start manager")
	}

	stopRecorder := setupControllers(mgr, cfgs, &o)
	queue, err := setupKueue(mgr, o.kueue)
	if err != nil {
		fatal(err, "Unable to set up the Kueue integration")
	}
	readyz := setupWebhooks(mgr, cfgs.dryRun, &o, tlsOpts, queue)
	setupProbes(mgr, readyz, api)

	setupLog.Info("Starting manager", "qps", o.qps, "burst", o.burst, "maxConcurrentReconciles", o.maxConcurrent)
	err = mgr.Start(ctrl.SetupSignalHandler())
	stopRecorder()
	if err != nil {
		fatal(err, "Problem running manager")
	}
}

// fatal logs a setup failure and exits with status 1.
func fatal(err error, msg string, keysAndValues ...any) {
	setupLog.Error(err, msg, keysAndValues...)
	os.Exit(1)
}
