package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// This suite's kube-apiserver does not serve the Workload API (no feature
// gate GenericWorkload): test/integration/gang has one that does.
var _ = Describe("Gang scheduling where the cluster does not serve the Workload API", func() {
	It("creates no pod, and says why in condition PodGroupReady, the phase and a Warning event", func() {
		job := harness.MakeIndexedBatchJob("gang", ns).Completions(2).Parallelism(2).GangScheduling(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			c := meta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodGroupReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(ibjv1.ReasonWorkloadAPINotServed))
			g.Expect(c.Message).To(ContainSubstring("does not serve scheduling.k8s.io/v1beta1 Workloads and PodGroups"))
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseWorkloadAPINotServed))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, 10*time.Second).
			Should(ContainElement(ibjv1.ReasonWorkloadAPINotServed))
		Consistently(func() int { return len(jobPods(ctx, ns, job.Name)) }, 2*time.Second, 200*time.Millisecond).Should(BeZero())
	})
})
