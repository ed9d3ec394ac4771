// Package gang_test runs the operator's reconciler against a kube-apiserver
// that serves the Workload API (scheduling.k8s.io/v1beta1, Kubernetes 1.37
// with feature gate GenericWorkload, and the gates of its topology
// constraints and shared claims): a job with spec.scheduling (or the
// deprecated spec.gangScheduling) gets its Workload and PodGroup carrying
// its settings, and its pods point at the PodGroup. There is
// no scheduler here; the e2e suite's gang spec runs kube-scheduler. The
// controller suite holds the other side, an API server that does not
// serve the API.
package gang_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/indexed-batch-job/indexed-batch-job/internal/controller"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

var (
	k8sClient client.Client
	clientset kubernetes.Interface
	testEnv   *envtest.Environment
	scheme    = runtime.NewScheme()
	stopOp    context.CancelFunc
)

func TestGang(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "IndexedBatchJob gang scheduling integration suite")
}

var _ = BeforeSuite(func() {
	if assets := os.Getenv("KUBEBUILDER_ASSETS"); assets != "" {
		minor, err := harness.ControlPlaneMinor(assets)
		Expect(err).NotTo(HaveOccurred())
		if minor < harness.WorkloadAPIMinor {
			Skip(fmt.Sprintf("kube-apiserver 1.%d cannot serve the Workload API (1.%d or later)", minor, harness.WorkloadAPIMinor))
		}
	}
	env, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: scheme, Log: GinkgoWriter, WorkloadAPI: true,
		FeatureGates: controlplane.WorkloadSchedulingFeatureGates})
	Expect(err).NotTo(HaveOccurred())
	testEnv, k8sClient, clientset = env.Env, env.Client, env.Clientset

	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controller.CacheOptions(nil),
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	recorder, stopRecorder := controller.NewEventRecorder(clientset, scheme, "indexedbatchjob-controller")
	r := controller.NewReconciler(mgr.GetClient(), recorder, clock.RealClock{}, controller.Backoff{Base: 200 * time.Millisecond, Max: 2 * time.Second})
	Expect(r.SetupWithManager(mgr, nil, 4)).To(Succeed())
	ctx, cancel := context.WithCancel(context.Background())
	stopOp = cancel
	go func() {
		defer GinkgoRecover()
		defer stopRecorder()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if stopOp != nil {
		stopOp()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
