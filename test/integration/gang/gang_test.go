package gang_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

var _ = Describe("A job with gangScheduling", func() {
	It("gets a Workload and a PodGroup it controls, its pods point at the PodGroup, and the gang shrinks to the indexes left", func(ctx SpecContext) {
		ns := testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "ibj-gang-"})
		job := harness.MakeIndexedBatchJob("train", ns).Completions(3).Parallelism(3).GangScheduling(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		name := job.Name + "-" + string(job.UID)[:8]

		By("the Workload and the PodGroup, controlled by the job, with a gang of parallelism pods")
		owner := metav1.OwnerReference{APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob", Name: job.Name, UID: job.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}
		for _, gvk := range []metav1.GroupVersionKind{
			metav1.GroupVersionKind(workloadapi.WorkloadGVK), metav1.GroupVersionKind(workloadapi.PodGroupGVK),
		} {
			u := get(ctx, ns, name, gvk)
			Expect(u.GetOwnerReferences()).To(ConsistOf(owner), gvk.Kind)
			Expect(minCount(u)).To(Equal(int64(3)), gvk.Kind)
		}
		pg := get(ctx, ns, name, metav1.GroupVersionKind(workloadapi.PodGroupGVK))
		ref, _, _ := unstructured.NestedStringMap(pg.Object, "spec", "workloadRef")
		Expect(ref).To(Equal(map[string]string{"workloadName": name, "templateName": "workers"}))
		Eventually(func(g Gomega) {
			var j ibjv1.IndexedBatchJob
			g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(job), &j)).To(Succeed())
			c := meta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodGroupReady)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(ibjv1.ReasonPodGroupCreated))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("every pod naming the PodGroup in spec.schedulingGroup, which the API server kept")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(3))
			for _, p := range pods.Items {
				g.Expect(p.Spec.SchedulingGroup).NotTo(BeNil(), p.Name)
				g.Expect(p.Spec.SchedulingGroup.PodGroupName).To(Equal(ptr.To(name)), p.Name)
			}
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())

		By("indexes 0 and 1 succeeding: one index left, so a gang of 1")
		sim := podsim.New(podsim.ForJob(clientset, ns, job.Name, func(ix, _ int) podsim.Plan {
			return podsim.Plan{Hold: ix == 2}
		}))
		Expect(sim.Run(context.Background())).To(Succeed())
		DeferCleanup(sim.Stop)
		for _, gvk := range []metav1.GroupVersionKind{
			metav1.GroupVersionKind(workloadapi.WorkloadGVK), metav1.GroupVersionKind(workloadapi.PodGroupGVK),
		} {
			Eventually(func() int64 { return minCount(get(ctx, ns, name, gvk)) }, 20*time.Second, 200*time.Millisecond).
				Should(Equal(int64(1)), gvk.Kind)
		}
	})
})

// get reads an object of the Workload API from the API server, waiting
// for it to exist.
func get(ctx context.Context, ns, name string, gvk metav1.GroupVersionKind) *unstructured.Unstructured {
	GinkgoHelper()
	u := workloadapi.Empty(workloadapi.GroupVersion.WithKind(gvk.Kind))
	Eventually(func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, u)
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
	return u
}

// minCount is the gang's size the object holds.
func minCount(u *unstructured.Unstructured) int64 {
	n, _ := workloadapi.GangMinCount(u)
	return n
}
