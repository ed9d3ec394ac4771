package webhook_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// inPlaceJob is a job whose exit code 3 of container containerName (every
// container when empty) is retried in place.
func inPlaceJob(ns, containerName string) *ibjv1.IndexedBatchJob {
	return harness.MakeIndexedBatchJob("in-place", ns).InitContainer("setup").BackoffLimitPerIndex(2).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, containerName, batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).
		RetryInPlace(0).Obj()
}

var _ = Describe("Retry in place", func() {
	It("refuses an InPlace rule naming an init container, and a template's own container restart rules beside one", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		err := k8sClient.Create(ctx, inPlaceJob(ns, "setup"))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.podFailurePolicy.rules[0].onExitCodes.containerName"))
		Expect(err.Error()).To(ContainSubstring("names an init container"))

		own := inPlaceJob(ns, "")
		own.Spec.Template.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		own.Spec.Template.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{Action: corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{1}}}}
		err = k8sClient.Create(ctx, own)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.template.spec.containers[0].restartPolicy", "spec.template.spec.containers[0].restartPolicyRules"))

		Expect(k8sClient.Create(ctx, inPlaceJob(ns, "main"))).To(Succeed(), "an InPlace rule on a regular container")
	})

	It("warns when nodes run a kubelet older than v1.35, naming how many", func() {
		for name, kubelet := range map[string]string{"old-1": "v1.34.3", "old-2": "v1.32.0", "new-1": "v1.37.2"} {
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
			Expect(k8sClient.Create(ctx, node)).To(Succeed())
			DeferCleanup(func() { Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), node))).To(Succeed()) })
			node.Status.NodeInfo.KubeletVersion = kubelet
			Expect(k8sClient.Status().Update(ctx, node)).To(Succeed())
		}
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		warnings.take()
		Eventually(func() []string {
			job := inPlaceJob(ns, "")
			job.Name = ""
			job.GenerateName = "in-place-"
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			return warnings.take()
		}, 10*time.Second, 500*time.Millisecond).Should(ContainElement(And(
			HavePrefix("2 nodes run a kubelet older than v1.35"),
			ContainSubstring("replaced with a new pod instead"))))

		By("no warning for a job that does not retry in place")
		plain := harness.MakeIndexedBatchJob("plain", ns).Obj()
		Expect(k8sClient.Create(ctx, plain)).To(Succeed())
		Expect(warnings.take()).To(BeEmpty())
	})

	It("refuses the job where the API server drops container restart rules (feature gate ContainerRestartRules off)", func() {
		off, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: runtime.NewScheme(), Log: GinkgoWriter, Webhooks: true,
			FeatureGates: "ContainerRestartRules=false,RestartAllContainersOnContainerExits=false"})
		Expect(err).NotTo(HaveOccurred())
		offCtx, stop := context.WithCancel(ctx)
		DeferCleanup(func() {
			stop()
			Expect(off.Env.Stop()).To(Succeed())
		})
		serveWebhook(offCtx, off)

		ns := testutil.NewNamespace(ctx, off.Client, testutil.NamespaceOptions{})
		err = off.Client.Create(ctx, inPlaceJob(ns, ""))
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.podFailurePolicy.rules[0].retry"))
		Expect(err.Error()).To(ContainSubstring("dropped the container restart rules"))
		Expect(err.Error()).To(ContainSubstring("Kubernetes 1.35 or later with feature gate ContainerRestartRules"))

		By("a job that does not retry in place is admitted there")
		Expect(off.Client.Create(ctx, harness.MakeIndexedBatchJob("plain", ns).Obj())).To(Succeed())
	})
})
