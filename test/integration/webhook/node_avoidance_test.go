package webhook_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

var _ = Describe("Node avoidance", func() {
	It("refuses Required where a retry could never be placed, at create and on update, and warns where Preferred does nothing", func() {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{})
		pinned := harness.MakeIndexedBatchJob("pinned", ns).BackoffLimitPerIndex(1).NodeSelector("kubernetes.io/hostname", "gpu-7").
			NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj()
		err := k8sClient.Create(ctx, pinned)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.nodeAvoidance.mode"))
		Expect(err.Error()).To(ContainSubstring("pins the pods to 1 node(s) (gpu-7)"))

		By("admitting it as Preferred, then refusing the update to Required")
		pinned = harness.MakeIndexedBatchJob("pinned", ns).BackoffLimitPerIndex(1).NodeSelector("kubernetes.io/hostname", "gpu-7").
			NodeAvoidance(ibjv1.NodeAvoidancePreferred, 0).Obj()
		Expect(k8sClient.Create(ctx, pinned)).To(Succeed())
		pinned.Spec.NodeAvoidance.Mode = ibjv1.NodeAvoidanceRequired
		err = k8sClient.Update(ctx, pinned)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(causeFields(err)).To(ConsistOf("spec.nodeAvoidance.mode"))

		By("warning where the template names its node")
		warnings.take()
		named := harness.MakeIndexedBatchJob("named", ns).NodeAvoidance(ibjv1.NodeAvoidancePreferred, 0).Obj()
		named.Spec.Template.Spec.NodeName = "gpu-7"
		Expect(k8sClient.Create(ctx, named)).To(Succeed())
		Expect(warnings.take()).To(ContainElement(ContainSubstring("so no node can be avoided")))
	})
})
