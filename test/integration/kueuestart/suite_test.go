// Package kueuestart_test checks how the operator's Kueue integration
// starts: inside the running operator, never by restarting it. It runs the
// operator's manager as cmd/main.go wires it (the reconciler, the webhook
// with the integration's defaulting, the integration in mode auto) against
// a real kube-apiserver (envtest) that serves no Kueue API at first,
// installs Kueue's CRDs under it and watches the integration start in the
// same manager; then it makes the integration's start fail and checks that
// the rest of the operator runs on, and says why, until a later try
// succeeds.
package kueuestart_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/internal/webhook"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

var (
	ctx       context.Context
	cancel    context.CancelFunc
	env       *harness.Envtest
	cfg       *rest.Config
	k8sClient client.Client
	scheme    = runtime.NewScheme()
)

func TestKueueStart(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "The Kueue integration starts inside the running operator")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	Expect(ibjkueue.AddToScheme(scheme)).To(Succeed())
	var err error
	// No Kueue CRD: the specs install it under a running operator.
	env, err = harness.StartEnvtest(harness.EnvtestOptions{Scheme: scheme, Log: GinkgoWriter, Webhooks: true})
	Expect(err).NotTo(HaveOccurred())
	cfg, k8sClient = env.Config, env.Client
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if env != nil {
		Expect(env.Env.Stop()).To(Succeed())
	}
})

// operator is one run of the operator's manager.
type operator struct {
	integration *ibjkueue.Integration
	stop        context.CancelFunc
	// done receives what the manager's Start returned.
	done chan error
}

// startOperator starts a manager with what the operator runs, as
// cmd/main.go sets it up: its reconciler, its webhook with the Kueue
// integration's defaulting, and the integration with o (mode auto unless o
// says). The manager runs until the spec ends.
func startOperator(o ibjkueue.Options) *operator {
	GinkgoHelper()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
		WebhookServer:          env.WebhookServer(),
		// Each spec runs a manager of its own, with the same controllers.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	r := controller.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder("indexedbatchjob-controller"),
		clock.RealClock{}, controller.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second})
	Expect(r.SetupWithManager(mgr, nil, 4)).To(Succeed())
	if o.Mode == "" {
		o.Mode = "auto"
	}
	integration, err := ibjkueue.Setup(mgr, o)
	Expect(err).NotTo(HaveOccurred())
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	validator := webhook.NewValidator(direct, webhook.DefaultDryRunTimeout)
	validator.Queue = integration.Validator(direct)
	webhook.Register(mgr.GetWebhookServer(), scheme, webhook.Defaulter{Queue: integration.Defaulter(direct)}, validator)

	runCtx, stop := context.WithCancel(ctx)
	op := &operator{integration: integration, stop: stop, done: make(chan error, 1)}
	go func() { op.done <- mgr.Start(runCtx) }()
	DeferCleanup(func() {
		stop()
		Eventually(op.done, time.Minute).Should(Receive(Succeed()), "the manager stops cleanly")
	})
	Eventually(env.WebhookServing, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	return op
}

// running fails unless the manager still runs: it was never stopped or
// restarted.
func (o *operator) running() {
	GinkgoHelper()
	select {
	case err := <-o.done:
		Fail("the operator's manager stopped: " + errString(err))
	default:
	}
}

func errString(err error) string {
	if err == nil {
		return "without an error"
	}
	return err.Error()
}

// startKubelet plays the kubelet for the job's pods: each runs and succeeds.
func startKubelet(ns, job string) *podsim.Simulator {
	GinkgoHelper()
	sim := podsim.New(podsim.ForJob(env.Clientset, ns, job, func(int, int) podsim.Plan { return podsim.Plan{} }))
	Expect(sim.Run(ctx)).To(Succeed())
	return sim
}
