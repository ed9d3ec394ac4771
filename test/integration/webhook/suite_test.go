// Package webhook_test runs the operator's admission webhook against a real
// kube-apiserver (envtest installs config/webhook with its own serving
// certificate): pod templates the Pod API refuses are refused for an
// IndexedBatchJob, with the Pod API's field and message; valid ones pass;
// new jobs get their defaults. No controller runs here.
package webhook_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

var (
	ctx       context.Context
	cancel    context.CancelFunc
	testEnv   *envtest.Environment
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
	warnings  = &warningRecorder{}
)

func TestWebhook(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "IndexedBatchJob admission webhook")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	env, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: scheme, Log: GinkgoWriter, Webhooks: true})
	Expect(err).NotTo(HaveOccurred())
	testEnv, cfg = env.Env, env.Config

	// The user's client records the warnings the API server relays.
	userCfg := rest.CopyConfig(cfg)
	userCfg.WarningHandler = warnings
	k8sClient, err = client.New(userCfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	serveWebhook(ctx, env)
})

// serveWebhook serves the webhook as cmd/main.go does, on env's
// certificate, until ctx ends; it reads the nodes' kubelet versions
// again after a second (not DefaultKubeletsRecheck), so that a spec sees
// the nodes it made.
func serveWebhook(ctx context.Context, env *harness.Envtest) {
	GinkgoHelper()
	cfg := env.Config
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		WebhookServer:          env.WebhookServer(),
	})
	Expect(err).NotTo(HaveOccurred())
	dryRun, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	v := webhook.NewValidator(dryRun, webhook.DefaultDryRunTimeout)
	v.SetKubeletsRecheck(time.Second)
	webhook.Register(mgr.GetWebhookServer(), scheme, webhook.Defaulter{}, v)
	go func() {
		defer GinkgoRecover()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	Eventually(env.WebhookServing, 30*time.Second).Should(Succeed())
}

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// warningRecorder keeps the warnings of the API server's responses.
type warningRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

// take returns the warnings seen so far and forgets them.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.seen
	w.seen = nil
	return out
}
