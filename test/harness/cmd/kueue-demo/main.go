// Command kueue-demo runs Kueue for `make demo-kueue`: Kueue's core controllers
// and scheduler, at the version go.mod pins, in one process against the
// cluster of $KUBECONFIG, configured with integrations.externalFrameworks:
// [IndexedBatchJob.v1alpha1.batch.indexedjob.dev] (test/harness/kueueinprocess).
// It stands in for a Kueue deployment on the demo's throwaway cluster, which
// cannot pull Kueue's image; it serves no webhooks (the CRDs' defaults and
// validation apply). Kueue's CRDs must be installed first.
package main

import (
	"flag"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueueinprocess"
)

func main() {
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("kueue")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(ibjv1.AddToScheme(scheme))
	utilruntime.Must(kueueinprocess.AddToScheme(scheme))
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		log.Error(err, "Unable to create the manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	if err := kueueinprocess.Setup(ctx, mgr, false); err != nil {
		log.Error(err, "Unable to set up Kueue")
		os.Exit(1)
	}
	log.Info("Starting Kueue")
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "Kueue stopped")
		os.Exit(1)
	}
}
