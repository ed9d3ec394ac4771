package webhook_test

import (
	"context"
	"fmt"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

var _ = Describe("spec.scheduling and the deprecated spec.gangScheduling", func() {
	// The suite's API server does not serve the Workload API, so it drops a
	// pod's schedulingGroup, which refuses every gang job (PodMutated):
	// these jobs go to one that serves it.
	It("warns that gangScheduling is deprecated and what it maps to, refuses both set, and treats scheduling's gang as a gang", func() {
		if assets := os.Getenv("KUBEBUILDER_ASSETS"); assets != "" {
			minor, err := harness.ControlPlaneMinor(assets)
			Expect(err).NotTo(HaveOccurred())
			if minor < harness.WorkloadAPIMinor {
				Skip(fmt.Sprintf("kube-apiserver 1.%d cannot serve the Workload API (1.%d or later)", minor, harness.WorkloadAPIMinor))
			}
		}
		served, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: runtime.NewScheme(), Log: GinkgoWriter, Webhooks: true, WorkloadAPI: true})
		Expect(err).NotTo(HaveOccurred())
		servedCtx, stop := context.WithCancel(ctx)
		DeferCleanup(func() {
			stop()
			Expect(served.Env.Stop()).To(Succeed())
		})
		serveWebhook(servedCtx, served)
		warnings := &warningRecorder{}
		userCfg := rest.CopyConfig(served.Config)
		userCfg.WarningHandler = warnings
		k8sClient, err := client.New(userCfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})

		By("admitting gangScheduling with a warning that names its replacement")
		warnings.take()
		old := harness.MakeIndexedBatchJob("old", ns).Completions(4).Parallelism(4).GangScheduling(3).Obj()
		Expect(k8sClient.Create(ctx, old)).To(Succeed())
		Expect(warnings.take()).To(ContainElement(And(
			ContainSubstring("spec.gangScheduling is deprecated"),
			ContainSubstring("spec.scheduling.schedulingPolicy.gang.minCount"),
			ContainSubstring("scheduling: {schedulingPolicy: {gang: {minCount: 3}}}"))))

		By("admitting spec.scheduling's gang without a warning")
		moved := harness.MakeIndexedBatchJob("moved", ns).Completions(4).Parallelism(4).Gang(3).Obj()
		Expect(k8sClient.Create(ctx, moved)).To(Succeed())
		Expect(warnings.take()).NotTo(ContainElement(ContainSubstring("deprecated")))

		By("refusing a job that sets both")
		both := harness.MakeIndexedBatchJob("both", ns).Completions(4).Parallelism(4).Gang(3).GangScheduling(3).Obj()
		err = k8sClient.Create(ctx, both)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ContainElement("spec.gangScheduling"))
		Expect(err.Error()).To(ContainSubstring("must not be set together with scheduling: gangScheduling is deprecated"))

		By("refusing Required node avoidance with spec.scheduling's gang, as with gangScheduling")
		avoiding := harness.MakeIndexedBatchJob("avoiding", ns).Completions(4).Parallelism(4).Gang(0).
			NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj()
		err = k8sClient.Create(ctx, avoiding)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.nodeAvoidance.mode"))
		Expect(err.Error()).To(ContainSubstring("with spec.scheduling.schedulingPolicy.gang the pods are placed all or none"))
	})
})
