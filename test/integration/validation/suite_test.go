// Package validation tests, against a real kube-apiserver, that the
// IndexedBatchJob CRD's schema and CEL rules reject at admission what the
// API reference (docs/api.md) says is invalid, with a message a user can act on,
// and accept the edge cases that are valid. No controller runs here.
package validation

import (
	"context"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// namespace holds every job of this suite. It is a constant, not a generated
// name, because the table entries build their jobs while the spec tree is
// constructed, before the API server is up.
const namespace = "validation"

var (
	ctx       context.Context
	cancel    context.CancelFunc
	testEnv   *envtest.Environment
	k8sClient client.Client
)

func TestValidation(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "IndexedBatchJob admission validation")
}

var _ = BeforeSuite(func() {
	ctx, cancel = context.WithCancel(context.Background())
	env, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: runtime.NewScheme(), Log: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	testEnv, k8sClient = env.Env, env.Client
	version, err := harness.CheckServerVersion(env.Config)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("kube-apiserver %s\n", version)

	Expect(k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())
})

var _ = AfterSuite(func() {
	if cancel != nil {
		cancel()
	}
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})
