package e2e

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// podsReadyConfig is Kueue's waitForPodsReady (on by default since Kueue
// v0.19, with a 30 min timeout) with short timeouts: an admitted job whose
// pods are not all ready within 8 s, or not again within 8 s of one
// failing, is evicted and requeued after about a second.
const podsReadyConfig = `waitForPodsReady:
  timeout: 8s
  recoveryTimeout: 8s
  requeuingStrategy:
    timestamp: Eviction
    backoffBaseSeconds: 1
    backoffMaxSeconds: 2
`

// The waitForPodsReady specs run Kueue's released manager with
// podsReadyConfig.
var _ = Describe("Kueue's waitForPodsReady", Label("kueue"), func() {
	var ns string
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx)
		startKueue(ctx, podsReadyConfig)
		createQueue(ctx, ns, "4")
	})

	It("evicts and requeues a job whose pods are not ready in time, which then runs to the exact status", func(ctx SpecContext) {
		// No node carries the label yet: the pods stay Pending.
		label := "e2e.indexedjob.dev/podsready-" + ns
		job := harness.MakeIndexedBatchJob("late", ns).Completions(4).Parallelism(2).
			Label(queueNameLabel, "queue").
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
			NodeSelector(label, "yes").
			PodAnnotation(kwokcluster.DurationAnnotation, "1s").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		By("the pods wait for a node past the timeout: Kueue evicts the job, which gives its pods up uncounted")
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, job.Name)
			g.Expect(wl).NotTo(BeNil())
			g.Expect(wl.Status.RequeueState).NotTo(BeNil(), "requeued")
			g.Expect(ptr.Deref(wl.Status.RequeueState.Count, 0)).To(BeNumerically(">=", 1))
		}, timeout, poll).Should(Succeed())
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, job.Name)
			evicted := apimeta.FindStatusCondition(wl.Status.Conditions, kueuev1beta2.WorkloadEvicted)
			g.Expect(evicted).NotTo(BeNil(), "evicted once")
			g.Expect(evicted.Reason).To(Equal(kueuev1beta2.WorkloadEvictedByPodsReadyTimeout))
		}, timeout, poll).Should(Succeed())
		got := getJob(ctx, ns, job.Name)
		Expect(got.Status.Failed).To(BeZero(), "the pods given up at the eviction count as no failure")
		Expect(got.Status.CompletedIndexes).To(BeEmpty())

		By("a node gets the label: the requeued job is admitted again and runs to its end")
		node := &corev1.Node{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: cluster.NodeNames[0]}, node)).To(Succeed())
		patch := client.MergeFrom(node.DeepCopy())
		node.Labels[label] = "yes"
		Expect(k8sClient.Patch(ctx, node, patch)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			node := &corev1.Node{}
			Expect(k8sClient.Get(ctx, client.ObjectKey{Name: cluster.NodeNames[0]}, node)).To(Succeed())
			patch := client.MergeFrom(node.DeepCopy())
			delete(node.Labels, label)
			Expect(k8sClient.Patch(ctx, node, patch)).To(Succeed())
		})
		testutil.WaitForJobCondition(ctx, k8sClient, ns, job.Name, ibjv1.ConditionComplete, 2*timeout)
		got = getJob(ctx, ns, job.Name)
		Expect(got.Status.Succeeded).To(BeEquivalentTo(4))
		Expect(got.Status.CompletedIndexes).To(Equal("0-3"))
		Expect(got.Status.Failed).To(BeZero())
		Expect(got.Status.FailedIndexes).To(BeNil())
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(4), "one pod an index: those given up at the eviction are gone")
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, job.Name)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadFinished)).To(BeTrue(), "Workload Finished")
		}, timeout, poll).Should(Succeed())
	})

	It("keeps PodsReady through a pod failure, its retry, and an index failed for good, with no eviction", func(ctx SpecContext) {
		// Index 1 fails after 1 s, is retried once (backoffLimitPerIndex 1)
		// and fails for good; index 0 runs 20 s, past the recovery
		// timeout. A count of ready and succeeded pods alone (batch/v1
		// Job's) would stay one short once index 1 is done failing, and
		// Kueue would evict the job.
		job := harness.MakeIndexedBatchJob("steady", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(1).
			Label(queueNameLabel, "queue").
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
			PodAnnotation(kwokcluster.DurationAnnotation, "20s").
			PodAnnotation(kwokcluster.FailIndexesAnnotation, "1").
			PodAnnotation(kwokcluster.FailDurationAnnotation, "1s").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		By("PodsReady once both pods run")
		Eventually(func(g Gomega) {
			wl := workloadOfJob(g, ctx, ns, job.Name)
			g.Expect(wl).NotTo(BeNil())
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadPodsReady)).To(BeTrue(), "PodsReady")
		}, timeout, poll).Should(Succeed())

		By("index 1 fails for good; index 0 runs on past the recovery timeout, with PodsReady")
		Eventually(func(g Gomega) {
			g.Expect(getJob(ctx, ns, job.Name).Status.FailedIndexes).To(Equal(ptr.To("1")))
		}, timeout, poll).Should(Succeed())
		Consistently(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			if apimeta.IsStatusConditionTrue(j.Status.Conditions, ibjv1.ConditionFailed) {
				return // finished: index 0 ran out its 20 s
			}
			wl := workloadOfJob(g, ctx, ns, job.Name)
			g.Expect(apimeta.IsStatusConditionTrue(wl.Status.Conditions, kueuev1beta2.WorkloadPodsReady)).To(BeTrue(), "PodsReady")
			g.Expect(wl.Status.RequeueState).To(BeNil(), "never requeued")
		}, "10s", poll).Should(Succeed())

		By("the job ends Failed by its failed index, exact, never evicted")
		testutil.WaitForJobCondition(ctx, k8sClient, ns, job.Name, ibjv1.ConditionFailed, timeout)
		got := getJob(ctx, ns, job.Name)
		Expect(got.Status.CompletedIndexes).To(Equal("0"))
		Expect(got.Status.FailedIndexes).To(Equal(ptr.To("1")))
		Expect(got.Status.Succeeded).To(BeEquivalentTo(1))
		Expect(got.Status.Failed).To(BeEquivalentTo(2), "index 1's two attempts")
		wl := workloadOfJob(Default, ctx, ns, job.Name)
		Expect(apimeta.FindStatusCondition(wl.Status.Conditions, kueuev1beta2.WorkloadEvicted)).To(BeNil(),
			fmt.Sprintf("evicted: %+v", wl.Status.Conditions))
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(3), "one pod for index 0, two for index 1")
	})
})
