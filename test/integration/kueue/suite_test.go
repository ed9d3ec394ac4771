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
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
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

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueue/inprocess"
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
	Expect(inprocess.AddToScheme(scheme)).To(Succeed())

	kueueDir, err := inprocess.ModuleDir()
	Expect(err).NotTo(HaveOccurred())
	mutating, validating, err := inprocess.CoreWebhooks(kueueDir)
	Expect(err).NotTo(HaveOccurred())
	testEnv = &envtest.Environment{
		CRDDirectoryPaths: []string{
			filepath.Join("..", "..", "..", "config", "crd", "bases"),
			inprocess.CRDDir(kueueDir),
		},
		ErrorIfCRDPathMissing: true,
		WebhookInstallOptions: envtest.WebhookInstallOptions{
			Paths:              []string{filepath.Join("..", "..", "..", "config", "webhook")},
			MutatingWebhooks:   mutating,
			ValidatingWebhooks: validating,
		},
	}
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
	Expect(inprocess.Setup(ctx, mgr, true)).To(Succeed())

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
