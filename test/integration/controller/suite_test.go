// Package controller_test runs the operator's reconciler against a real
// kube-apiserver (envtest). The tests play the kubelet with the shared pod
// simulator (podsim.ForJob): it binds pods and writes pod status, and the
// tests watch the IndexedBatchJob's status react.
package controller_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// testBackoff keeps the replacement delay short so the suite runs fast; the
// 10 s default is covered by unit tests.
var testBackoff = controller.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second}

var (
	cfg       *rest.Config
	k8sClient client.Client
	clientset kubernetes.Interface
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
)

func TestController(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "IndexedBatchJob controller integration suite")
}

var _ = BeforeSuite(func() {
	env, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: scheme, Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	testEnv, cfg, k8sClient, clientset = env.Env, env.Config, env.Client, env.Clientset
})

var _ = AfterSuite(func() {
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// Every spec gets its own namespace and a fresh operator; a failed spec
// prints the namespace's jobs and pods. Specs run one at a time.
var (
	ctx context.Context
	ns  string
	op  *operator
)

var _ = BeforeEach(func() {
	ctx = context.Background()
	ns = testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
	op = startOperator()
})

var _ = AfterEach(func() {
	if CurrentSpecReport().Failed() {
		dumpNamespace(ctx, ns)
	}
	if op != nil {
		op.stop()
	}
})

// operator is one running manager with the reconciler, as one operator
// process would be.
type operator struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startOperator starts a manager like cmd/main.go does (same cache options,
// same reconciler) and returns a handle to stop it, as a crash would. With
// namespaces it watches only those, as --namespaces does.
func startOperator(namespaces ...string) *operator {
	return startOperatorWith(operatorOptions{namespaces: namespaces})
}

// operatorOptions are what a spec sets of the operator's flags:
// --namespaces, --kube-api-qps and --kube-api-burst (the operator's rate
// limiter, none where qps is 0) and --counted-finalizer-hold (where not 0).
type operatorOptions struct {
	namespaces    []string
	qps           float32
	burst         int
	finalizerHold time.Duration
}

func startOperatorWith(o operatorOptions) *operator {
	namespaces := o.namespaces
	cfg := rest.CopyConfig(cfg)
	if o.qps > 0 {
		// As cmd does: one bucket for every client, on the default tick.
		cfg.QPS, cfg.Burst = o.qps, o.burst
		cfg.RateLimiter = throttle.New(o.qps, o.burst, 250*time.Millisecond)
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(namespaces),
		// Tests run several operators in one process, one after the other
		// or side by side, each registering the same controller name.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	recorder, stopRecorder := controller.NewEventRecorder(clientset, scheme, "indexedbatchjob-controller")
	r := controller.NewReconciler(mgr.GetClient(), recorder, clock.RealClock{}, testBackoff)
	if o.finalizerHold > 0 {
		r.SetReleaseBound(o.finalizerHold)
	}
	Expect(r.SetupWithManager(mgr, namespaces, 4)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	op := &operator{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(op.done)
		defer stopRecorder()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
	return op
}

// stop stops the manager and waits until it has.
func (o *operator) stop() {
	o.cancel()
	Eventually(o.done, 30*time.Second).Should(BeClosed())
}
