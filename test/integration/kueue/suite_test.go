// Package kueue_test runs the operator with its Kueue integration against a
// real kube-apiserver (envtest) and a real Kueue: Kueue's CRDs, webhooks,
// core controllers and scheduler at the version go.mod pins, started in
// process as Kueue's own integration suites start them, beside the
// operator's reconciler, its webhook and the integration's reconciler. The
// tests play the kubelet and watch Kueue queue, admit, preempt and resume
// IndexedBatchJobs.
package kueue_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
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

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
)

var (
	ctx       context.Context
	cancel    context.CancelFunc
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

func TestKueue(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "IndexedBatchJob with Kueue")
}

var _ = BeforeSuite(func() {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	Expect(os.Getenv("KUBEBUILDER_ASSETS")).NotTo(BeEmpty(),
		"KUBEBUILDER_ASSETS is not set: run `make test`, which builds the pinned control plane into bin/")
	ctx, cancel = context.WithCancel(context.Background())
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(ibjv1.AddToScheme(scheme)).To(Succeed())
	Expect(ibjkueue.AddToScheme(scheme)).To(Succeed())
	Expect(configapi.AddToScheme(scheme)).To(Succeed())

	kueueDir := kueueModuleDir()
	mutating, validating := kueueCoreWebhooks(filepath.Join(kueueDir, "config", "components", "webhook", "manifests.yaml"))
	testEnv = &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join("..", "..", "..", "config", "crd", "bases"),
			filepath.Join(kueueDir, "config", "components", "crd", "bases"),
		},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths:              []string{filepath.Join("..", "..", "..", "config", "webhook")},
			MutatingWebhooks:   mutating,
			ValidatingWebhooks: validating,
		},
	}
	var err error
	cfg, err = testEnv.Start()
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	startManager()
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// kueueModuleDir is where the Go module cache holds the Kueue module go.mod
// pins, whose CRDs and webhook configurations the suite installs.
func kueueModuleDir() string {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kueue").Output()
	Expect(err).NotTo(HaveOccurred(), "go list -m sigs.k8s.io/kueue")
	dir := strings.TrimSpace(string(out))
	Expect(dir).NotTo(BeEmpty(), "the Kueue module is not in the module cache: run go mod download")
	return dir
}

// kueueCoreWebhooks reads Kueue's webhook configurations and keeps the
// webhooks of Kueue's own API (Workloads, ClusterQueues, ResourceFlavors,
// ...): those of the built-in job integrations (batch Jobs, Pods, ...) are
// not served here, as Kueue's manager does not serve them either unless
// they are enabled.
func kueueCoreWebhooks(path string) ([]*admissionv1.MutatingWebhookConfiguration, []*admissionv1.ValidatingWebhookConfiguration) {
	raw, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	kueueAPI := func(c admissionv1.WebhookClientConfig) bool {
		return c.Service != nil && c.Service.Path != nil && strings.Contains(*c.Service.Path, "-kueue-x-k8s-io-")
	}
	var mutating []*admissionv1.MutatingWebhookConfiguration
	var validating []*admissionv1.ValidatingWebhookConfiguration
	for _, doc := range strings.Split(string(raw), "\n---") {
		var kind struct{ Kind string }
		Expect(yaml.Unmarshal([]byte(doc), &kind)).To(Succeed())
		switch kind.Kind {
		case "MutatingWebhookConfiguration":
			c := &admissionv1.MutatingWebhookConfiguration{}
			Expect(yaml.Unmarshal([]byte(doc), c)).To(Succeed())
			c.Webhooks = slices.DeleteFunc(c.Webhooks, func(w admissionv1.MutatingWebhook) bool { return !kueueAPI(w.ClientConfig) })
			mutating = append(mutating, c)
		case "ValidatingWebhookConfiguration":
			c := &admissionv1.ValidatingWebhookConfiguration{}
			Expect(yaml.Unmarshal([]byte(doc), c)).To(Succeed())
			c.Webhooks = slices.DeleteFunc(c.Webhooks, func(w admissionv1.ValidatingWebhook) bool { return !kueueAPI(w.ClientConfig) })
			validating = append(validating, c)
		}
	}
	Expect(mutating).NotTo(BeEmpty())
	Expect(validating).NotTo(BeEmpty())
	return mutating, validating
}

// startManager starts one manager with what the operator runs (its
// reconciler, its webhook with the Kueue integration's defaulting, the
// integration in mode enabled) and what Kueue's manager runs (its
// webhooks, core controllers and scheduler), as Kueue's integration suites
// do for the job integrations. Kueue is configured with
// integrations.externalFrameworks: [IndexedBatchJob.v1alpha1.batch.indexedjob.dev].
func startManager() {
	opts := testEnv.WebhookInstallOptions
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
		WebhookServer: ctrlwebhook.NewServer(ctrlwebhook.Options{
			Host: opts.LocalServingHost, Port: opts.LocalServingPort, CertDir: opts.LocalServingCertDir,
		}),
	})
	Expect(err).NotTo(HaveOccurred())

	// The operator, as cmd/main.go sets it up.
	r := controller.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder("indexedbatchjob-controller"),
		clock.RealClock{}, controller.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second})
	Expect(r.SetupWithManager(mgr, nil, 4)).To(Succeed())
	integration, err := ibjkueue.Setup(mgr, ibjkueue.ModeEnabled)
	Expect(err).NotTo(HaveOccurred())
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	webhook.Register(mgr.GetWebhookServer(), scheme, webhook.Defaulter{Queue: integration.Defaulter(direct)},
		webhook.NewValidator(direct, webhook.DefaultDryRunTimeout))

	// Kueue, as its manager sets itself up with the external framework.
	Expect(jobframework.RegisterExternalJobType(ibjkueue.FrameworkName)).To(Succeed())
	Expect(indexer.Setup(ctx, mgr.GetFieldIndexer())).To(Succeed())
	cCache := schdcache.New(mgr.GetClient())
	expectations := preemptexpectations.New()
	requeuer := qcache.NewRequeuer(qcache.WithBatchPeriod(100 * time.Millisecond))
	go func() { _ = requeuer.Start(ctx) }()
	queues := qcache.NewManager(mgr.GetClient(), cCache, requeuer, qcache.WithPreemptionExpectations(expectations))
	configuration := &configapi.Configuration{}
	mgr.GetScheme().Default(configuration)
	failed, err := core.SetupControllers(mgr, queues, cCache, configuration,
		core.SetupControllersOpts{PreemptionExpectations: expectations})
	Expect(err).NotTo(HaveOccurred(), "Kueue controller %s", failed)
	failed, err = kueuewebhooks.Setup(mgr, nil)
	Expect(err).NotTo(HaveOccurred(), "Kueue webhook %s", failed)
	sched := scheduler.New(queues, cCache, mgr.GetClient(), mgr.GetEventRecorder(kueueconstants.AdmissionName),
		scheduler.WithPreemptionExpectations(expectations))
	Expect(sched.Start(ctx)).To(Succeed())

	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	addr := fmt.Sprintf("%s:%d", opts.LocalServingHost, opts.LocalServingPort)
	Eventually(func() error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			return err
		}
		return conn.Close()
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	Eventually(integration.Active, 30*time.Second).Should(BeTrue())
}

