package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	ibjwebhook "github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
)

// webhookFlags configure the admission webhook and its certificates.
type webhookFlags struct {
	enabled        bool
	port           int
	certDir        string
	certManagement string
	namespace      string
	secretName     string
	serviceName    string
	validatingName string
	mutatingName   string
	extraDNSNames  string
	dryRunTimeout  time.Duration
}

func (f *webhookFlags) bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.enabled, "enable-webhook", false,
		"Serve the defaulting and validating admission webhook for IndexedBatchJobs. It needs the webhook "+
			"configurations, Service and Secret of config/webhook installed; the manifests and the Helm chart "+
			"turn it on. Off for a bare binary (make run), which has none of them.")
	fs.IntVar(&f.port, "webhook-port", 9443, "The port the webhook server listens on.")
	fs.StringVar(&f.certDir, "webhook-cert-dir", "/tmp/k8s-webhook-server/serving-certs",
		"Where the webhook server reads tls.crt and tls.key.")
	fs.StringVar(&f.certManagement, "webhook-cert-management", "internal",
		"internal: the operator issues, rotates and injects its own certificate (a self-signed CA in the Secret "+
			"--webhook-secret-name); external: another component (cert-manager) writes the certificate into "+
			"--webhook-cert-dir and injects the CA bundle.")
	fs.StringVar(&f.namespace, "webhook-namespace", "",
		"Namespace of the webhook's Service and Secret; empty means the pod's own namespace "+
			"(indexed-batch-job-system out of cluster).")
	fs.StringVar(&f.secretName, "webhook-secret-name", "indexed-batch-job-webhook-server-cert",
		"The Secret that holds the webhook's CA and certificate (internal certificate management).")
	fs.StringVar(&f.serviceName, "webhook-service-name", "indexed-batch-job-webhook-service",
		"The webhook's Service; the certificate is issued for <service>.<namespace>.svc.")
	fs.StringVar(&f.validatingName, "webhook-validating-configuration",
		"indexed-batch-job-validating-webhook-configuration",
		"The ValidatingWebhookConfiguration whose CA bundle the operator keeps current (internal certificate management).")
	fs.StringVar(&f.mutatingName, "webhook-mutating-configuration", "indexed-batch-job-mutating-webhook-configuration",
		"The MutatingWebhookConfiguration whose CA bundle the operator keeps current (internal certificate management).")
	fs.StringVar(&f.extraDNSNames, "webhook-extra-dns-names", "",
		"Comma-separated further DNS names of the certificate (localhost for an operator run outside the cluster).")
	fs.DurationVar(&f.dryRunTimeout, "webhook-dry-run-timeout", ibjwebhook.DefaultDryRunTimeout,
		"How long the validating webhook waits for the API server's dry-run create of a job's first pod; "+
			"keep it below the webhook configuration's timeoutSeconds (10 s).")
}

// queueSteps are the Kueue integration's steps of the webhooks, given the
// webhook's client: its defaulting (ibjwebhook.Defaulter.Queue) and its
// validation (ibjwebhook.Validator.Queue).
type queueSteps struct {
	defaulting func(client.Client) func(context.Context, *ibjv1.IndexedBatchJob) error
	validation func(client.Client) ibjwebhook.QueueValidation
}

// setupWebhook registers the webhooks on the manager's webhook server,
// started only once its certificates are ready, and, with internal
// certificate management, the certificate rotator.
func setupWebhook(
	mgr ctrl.Manager, dryRunCfg *rest.Config, f webhookFlags, tlsOpts []func(*tls.Config), queue *queueSteps,
) (ibjwebhook.DelayedServer, error) {
	ready := make(chan struct{})
	switch f.certManagement {
	case "internal":
		var extra []string
		for _, n := range strings.Split(f.extraDNSNames, ",") {
			if n = strings.TrimSpace(n); n != "" {
				extra = append(extra, n)
			}
		}
		certsReady, err := ibjwebhook.ManageCerts(mgr, ibjwebhook.CertOptions{
			SecretName:       f.secretName,
			Namespace:        operatorNamespace(f.namespace),
			ServiceName:      f.serviceName,
			ExtraDNSNames:    extra,
			ValidatingConfig: f.validatingName,
			MutatingConfig:   f.mutatingName,
			CertDir:          f.certDir,
		})
		if err != nil {
			return ibjwebhook.DelayedServer{}, err
		}
		go func() { <-certsReady; close(ready) }()
	case "external":
		close(ready)
	default:
		return ibjwebhook.DelayedServer{}, fmt.Errorf(
			"--webhook-cert-management must be internal or external, not %q", f.certManagement)
	}
	dryRun, err := client.New(dryRunCfg, client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return ibjwebhook.DelayedServer{}, err
	}
	// Not the manager's own webhook server, which would start at once and
	// fail without its certificate.
	srv := ibjwebhook.DelayedServer{
		Server: webhook.NewServer(webhook.Options{Port: f.port, CertDir: f.certDir, TLSOpts: tlsOpts}),
		Ready:  ready,
	}
	var d ibjwebhook.Defaulter
	v := ibjwebhook.NewValidator(dryRun, f.dryRunTimeout)
	if queue != nil {
		d.Queue = queue.defaulting(dryRun)
		v.Queue = queue.validation(dryRun)
	}
	ibjwebhook.Register(srv, mgr.GetScheme(), d, v)
	return srv, mgr.Add(srv)
}

// operatorNamespace is the flag's namespace if set, else the pod's namespace, else the
// namespace the manifests install into.
func operatorNamespace(namespace string) string {
	if namespace != "" {
		return namespace
	}
	if data, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(data)); ns != "" {
			return ns
		}
	}
	return "indexed-batch-job-system"
}
