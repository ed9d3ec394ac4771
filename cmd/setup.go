package main

import (
	"crypto/tls"
	"errors"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"

	"github.com/indexed-batch-job/indexed-batch-job/internal/apicheck"
	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
)

// setupControllers adds the IndexedBatchJob controller to mgr, its events
// sent on a client of the manager's config, following the API server's
// load where cfgs has a Monitor, and returns the function that stops the event
// recorder once the manager has stopped.
func setupControllers(mgr ctrl.Manager, cfgs restConfigs, o *options) func() {
	clientset, err := kubernetes.NewForConfig(cfgs.manager)
	if err != nil {
		fatal(err, "Unable to create the events client")
	}
	recorder, stopRecorder := controller.NewEventRecorder(clientset, scheme, "indexedbatchjob-controller")
	r := controller.NewReconciler(mgr.GetClient(), recorder,
		clock.RealClock{}, controller.Backoff{Base: o.backoffBase, Max: o.backoffMax})
	if cfgs.load != nil {
		r.SetServerLoad(cfgs.load)
	}
	r.SetReleaseBound(o.finalizerHold)
	if err := r.SetupWithManager(mgr, o.watchedNamespaces(), o.maxConcurrent); err != nil {
		fatal(err, "Unable to create controller", "controller", "IndexedBatchJob")
	}
	return stopRecorder
}

// setupWebhooks serves the admission webhooks when --enable-webhook is set,
// with queue as the Kueue integration's steps of them, and returns the
// manager's readiness check: ready once the certificates are ready and the
// webhook serves, so that a rollout waits for a replica that can admit
// jobs; without the webhook, ready at once.
func setupWebhooks(
	mgr ctrl.Manager, dryRunCfg *rest.Config, o *options, tlsOpts []func(*tls.Config), queue *queueSteps,
) healthz.Checker {
	if !o.webhook.enabled {
		return healthz.Ping
	}
	srv, err := setupWebhook(mgr, dryRunCfg, o.webhook, tlsOpts, queue)
	if err != nil {
		fatal(err, "Unable to set up the webhook")
	}
	return srv.StartedChecker()
}

// setupProbes adds the liveness check, the readiness check readyz and the
// kube-apiserver check api (a runnable and a readiness check) to mgr.
func setupProbes(mgr ctrl.Manager, readyz healthz.Checker, api *apicheck.Checker) {
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fatal(err, "Unable to set up health check")
	}
	if err := mgr.AddReadyzCheck("readyz", readyz); err != nil {
		fatal(err, "Unable to set up ready check")
	}
	if err := errors.Join(mgr.Add(api), mgr.AddReadyzCheck("kube-apiserver", api.Check)); err != nil {
		fatal(err, "Unable to set up the kube-apiserver check")
	}
}
