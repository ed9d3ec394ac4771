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
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
	"github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueueinprocess"
)

var (
	ctx       context.Context
	cancel    context.CancelFunc
	env       *harness.Envtest
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
	ctx, cancel = context.WithCancel(context.Background())
	Expect(ibjkueue.AddToScheme(scheme)).To(Succeed())
	Expect(kueueinprocess.AddToScheme(scheme)).To(Succeed())

	kueueDir, err := kueueinprocess.ModuleDir()
	Expect(err).NotTo(HaveOccurred())
	mutating, validating, err := kueueinprocess.CoreWebhooks(kueueDir)
	Expect(err).NotTo(HaveOccurred())
	env, err = harness.StartEnvtest(harness.EnvtestOptions{
		Scheme: scheme, Log: GinkgoWriter,
		MoreCRDDirs: []string{kueueinprocess.CRDDir(kueueDir)},
		Webhooks:    true, MutatingWebhooks: mutating, ValidatingWebhooks: validating,
	})
	Expect(err).NotTo(HaveOccurred())
	testEnv, cfg, k8sClient = env.Env, env.Config, env.Client
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

// startManager starts one manager with what the operator runs (its
// reconciler, its webhook with the Kueue integration's defaulting, the
// integration in mode enabled, with manageJobsWithoutQueueName on and
// Kueue's default managedJobsNamespaceSelector: every job in a spec's
// namespace is Kueue's, none in kueue-system is) and what Kueue's manager
// runs (its webhooks, core controllers and scheduler), as Kueue's
// integration suites do for the job integrations. Kueue is configured with
// integrations.externalFrameworks: [IndexedBatchJob.v1alpha1.batch.indexedjob.dev].
func startManager() {
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
		WebhookServer:          env.WebhookServer(),
	})
	Expect(err).NotTo(HaveOccurred())

	// The operator, as cmd/main.go sets it up.
	r := controller.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder("indexedbatchjob-controller"),
		clock.RealClock{}, controller.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second})
	Expect(r.SetupWithManager(mgr, nil, 4)).To(Succeed())
	settings, err := ibjkueue.ParseSettings(true, ibjkueue.DefaultManagedJobsNamespaceSelector)
	Expect(err).NotTo(HaveOccurred())
	integration, err := ibjkueue.Setup(mgr, ibjkueue.Options{Mode: kueueapi.ModeEnabled, Settings: settings})
	Expect(err).NotTo(HaveOccurred())
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	validator := webhook.NewValidator(direct, webhook.DefaultDryRunTimeout)
	validator.Queue = integration.Validator(direct)
	webhook.Register(mgr.GetWebhookServer(), scheme, webhook.Defaulter{Queue: integration.Defaulter(direct)}, validator)

	// Kueue, as its manager sets itself up with the external framework.
	Expect(kueueinprocess.Setup(ctx, mgr, true)).To(Succeed())

	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	Eventually(env.WebhookServing, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	Eventually(integration.Active, 30*time.Second).Should(BeTrue())
}
