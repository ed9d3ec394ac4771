// Package kueueinprocess runs Kueue itself, at the version go.mod pins, inside a
// controller-runtime manager: its core controllers and scheduler, and
// optionally its webhooks, configured with IndexedBatchJob as an external
// framework (integrations.externalFrameworks), as Kueue's own integration
// suites run it. The Kueue integration suite (test/integration/kueue) and
// `make demo-kueue` (test/harness/cmd/kueue-demo) use it where no Kueue is deployed; the
// operator never does.
package kueueinprocess

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	qcache "sigs.k8s.io/kueue/pkg/cache/queue"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	kueueconstants "sigs.k8s.io/kueue/pkg/constants"
	"sigs.k8s.io/kueue/pkg/controller/core"
	"sigs.k8s.io/kueue/pkg/controller/core/indexer"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/scheduler"
	preemptexpectations "sigs.k8s.io/kueue/pkg/scheduler/preemption/expectations"
	kueuewebhooks "sigs.k8s.io/kueue/pkg/webhooks"
	"sigs.k8s.io/yaml"

	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
)

// AddToScheme adds Kueue's API and its configuration API to scheme.
func AddToScheme(scheme *runtime.Scheme) error {
	if err := kueuev1beta2.AddToScheme(scheme); err != nil {
		return err
	}
	return configapi.AddToScheme(scheme)
}

// Setup adds Kueue to mgr: its field indexes, core controllers (ClusterQueues,
// LocalQueues, ResourceFlavors, Workloads, ...) and scheduler, with its
// default configuration plus IndexedBatchJob as an external framework; and
// its webhooks on mgr's webhook server when webhooks is true. The
// scheduler runs until ctx is done.
func Setup(ctx context.Context, mgr ctrl.Manager, webhooks bool) error {
	if err := jobframework.RegisterExternalJobType(ibjkueue.FrameworkName); err != nil {
		return err
	}
	if err := indexer.Setup(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	cache := schdcache.New(mgr.GetClient())
	expectations := preemptexpectations.New()
	requeuer := qcache.NewRequeuer(qcache.WithBatchPeriod(100 * time.Millisecond))
	go func() { _ = requeuer.Start(ctx) }()
	queues := qcache.NewManager(mgr.GetClient(), cache, requeuer, qcache.WithPreemptionExpectations(expectations))
	configuration := &configapi.Configuration{}
	mgr.GetScheme().Default(configuration)
	configuration.Integrations.ExternalFrameworks = []string{ibjkueue.FrameworkName}
	if failed, err := core.SetupControllers(mgr, queues, cache, configuration,
		core.SetupControllersOpts{PreemptionExpectations: expectations}); err != nil {
		return fmt.Errorf("setting up the Kueue controller %s: %w", failed, err)
	}
	if webhooks {
		if failed, err := kueuewebhooks.Setup(mgr, nil); err != nil {
			return fmt.Errorf("setting up the Kueue webhook %s: %w", failed, err)
		}
	}
	sched := scheduler.New(queues, cache, mgr.GetClient(), mgr.GetEventRecorder(kueueconstants.AdmissionName),
		scheduler.WithPreemptionExpectations(expectations))
	return sched.Start(ctx)
}

// ModuleDir is where the Go module cache holds the Kueue module go.mod pins
// (its config/ has the CRDs and webhook configurations), as `go list -m`
// says from the working directory's module.
func ModuleDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m sigs.k8s.io/kueue: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("the Kueue module is not in the module cache: run go mod download")
	}
	return dir, nil
}

// CRDDir is the directory of Kueue's CRDs in the module at dir.
func CRDDir(dir string) string { return filepath.Join(dir, "config", "components", "crd", "bases") }

// CoreWebhooks reads Kueue's webhook configurations from the module at dir
// and keeps the webhooks of Kueue's own API (Workloads, ClusterQueues,
// ResourceFlavors, ...): those of the built-in job integrations (batch
// Jobs, Pods, ...), which Setup does not serve, are left out, as Kueue's
// manager leaves them unserved when they are not enabled.
func CoreWebhooks(dir string) ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config", "components", "webhook", "manifests.yaml"))
	if err != nil {
		return nil, nil, err
	}
	kueueAPI := func(c admissionv1.WebhookClientConfig) bool {
		return c.Service != nil && c.Service.Path != nil && strings.Contains(*c.Service.Path, "-kueue-x-k8s-io-")
	}
	var mutating []*admissionv1.MutatingWebhookConfiguration
	var validating []*admissionv1.ValidatingWebhookConfiguration
	for _, doc := range strings.Split(string(raw), "\n---") {
		var kind struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &kind); err != nil {
			return nil, nil, err
		}
		switch kind.Kind {
		case "MutatingWebhookConfiguration":
			c := &admissionv1.MutatingWebhookConfiguration{}
			if err := yaml.Unmarshal([]byte(doc), c); err != nil {
				return nil, nil, err
			}
			c.Webhooks = slices.DeleteFunc(c.Webhooks, func(w admissionv1.MutatingWebhook) bool { return !kueueAPI(w.ClientConfig) })
			mutating = append(mutating, c)
		case "ValidatingWebhookConfiguration":
			c := &admissionv1.ValidatingWebhookConfiguration{}
			if err := yaml.Unmarshal([]byte(doc), c); err != nil {
				return nil, nil, err
			}
			c.Webhooks = slices.DeleteFunc(c.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return !kueueAPI(w.ClientConfig) })
			validating = append(validating, c)
		}
	}
	if len(mutating) == 0 || len(validating) == 0 {
		return nil, nil, fmt.Errorf("no webhook configurations in %s", dir)
	}
	return mutating, validating, nil
}
