package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

// The gang specs run on a cluster of their own: kube-apiserver serving the
// Workload API, the real kube-scheduler with feature gate GenericWorkload
// (its GangScheduling plugin) in place of the suite's binder, and one kwok
// node with room for 2 of the jobs' 1-CPU pods. The same 4-pod job is run
// without and with spec.gangScheduling, and what kube-scheduler bound is
// read from the pods.
var _ = Describe("Gang scheduling", Label("gang"), Ordered, func() {
	var (
		gc *kwokcluster.Cluster
		c  client.Client
	)

	BeforeAll(func(ctx SpecContext) {
		minor, err := harness.ControlPlaneMinor(controlplane.BinDir(root))
		Expect(err).NotTo(HaveOccurred())
		if minor < harness.WorkloadAPIMinor {
			Skip(fmt.Sprintf("kube-apiserver 1.%d cannot serve the Workload API (1.%d or later)", minor, harness.WorkloadAPIMinor))
		}
		gc = startSpecCluster(ctx, "gang", "etcd, kube-apiserver (Workload API on), kube-scheduler (GenericWorkload) and one kwok node of 2 CPUs", kwokcluster.Options{
			Nodes: 1, KubeScheduler: true, WorkloadAPI: true, NodeAllocatable: nodeCapacity("2", "8Gi"),
		})
		c, err = client.New(gc.Config, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())

		By("starting the operator against it")
		proc := startOperatorOn(gc)
		DeferCleanup(func() { Expect(proc.Stop(30 * time.Second)).To(Succeed()) })
	})

	// job is the 4-index job both specs run: 4 pods at once, 1 CPU each,
	// each running 3 s.
	job := func(ns string) *harness.JobWrapper {
		return harness.MakeIndexedBatchJob("train", ns).Completions(4).Parallelism(4).
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).
			PodAnnotation(kwokcluster.DurationAnnotation, "3s")
	}
	namespace := func(ctx context.Context) string {
		return testutil.NewNamespace(ctx, c, testutil.NamespaceOptions{Prefix: "ibj-gang-"})
	}
	// bound counts the job's pods kube-scheduler bound, and how many exist.
	bound := func(ctx context.Context, ns string) (int, int) {
		var pods corev1.PodList
		Expect(c.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		n := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n, len(pods.Items)
	}

	It("without gangScheduling: kube-scheduler binds the 2 pods that fit, and the job runs 2 at a time", func(ctx SpecContext) {
		ns := namespace(ctx)
		Expect(c.Create(ctx, job(ns).Obj())).To(Succeed())
		Eventually(func() []int { n, all := bound(ctx, ns); return []int{n, all} }, 30*time.Second, 100*time.Millisecond).
			Should(Equal([]int{2, 4}), "2 of the 4 pods bound")
		testutil.WaitForJobCondition(ctx, c, ns, "train", ibjv1.ConditionComplete, 60*time.Second)
	})

	It("with gangScheduling: binds none of the 4 pods while only 2 fit, and all 4 once a second node makes room", func(ctx SpecContext) {
		ns := namespace(ctx)
		gang := job(ns).GangScheduling(0).Obj()
		Expect(c.Create(ctx, gang)).To(Succeed())
		Expect(c.Get(ctx, client.ObjectKeyFromObject(gang), gang)).To(Succeed())
		podGroup := gang.Name + "-" + string(gang.UID)[:8]

		By("the 4 pods created, each naming the job's PodGroup, none bound")
		Eventually(func(g Gomega) {
			var pods corev1.PodList
			g.Expect(c.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			g.Expect(pods.Items).To(HaveLen(4))
			for _, p := range pods.Items {
				g.Expect(p.Spec.SchedulingGroup).NotTo(BeNil(), p.Name)
				g.Expect(p.Spec.SchedulingGroup.PodGroupName).To(Equal(ptr.To(podGroup)), p.Name)
			}
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		// The status write that says so follows the creates: a busy
		// operator's pods can show before it.
		Eventually(func(g Gomega) {
			var j ibjv1.IndexedBatchJob
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(gang), &j)).To(Succeed())
			g.Expect(meta.IsStatusConditionTrue(j.Status.Conditions, ibjv1.ConditionPodGroupReady)).To(BeTrue(), "condition PodGroupReady: %v", j.Status.Conditions)
		}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
		Consistently(func() int { n, _ := bound(ctx, ns); return n }, 15*time.Second, 100*time.Millisecond).
			Should(BeZero(), "a pod of the gang bound while the whole gang cannot fit")

		By("a second node of 2 CPUs: the whole gang fits, and is bound")
		node, err := gc.AddNode(ctx)
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("added node %s\n", node)
		Eventually(func() []int { n, all := bound(ctx, ns); return []int{n, all} }, 60*time.Second, 100*time.Millisecond).
			Should(Equal([]int{4, 4}), "all 4 pods bound")
		testutil.WaitForJobCondition(ctx, c, ns, "train", ibjv1.ConditionComplete, 60*time.Second)
	})

	It("with gangScheduling and a RestartJob rule: each generation is one gang, bound once the last one ended", func(ctx SpecContext) {
		ns := namespace(ctx)
		// 4 CPUs on the two nodes, a gang of 4. Index 1 exits 3 after 3 s
		// in every generation; a stopped pod takes 2 s to shut down.
		gang := job(ns).GangScheduling(0).MaxRestarts(1).
			PodAnnotation(kwokcluster.DurationAnnotation, "forever").
			PodAnnotation(kwokcluster.FailIndexesAnnotation, "1").
			PodAnnotation(kwokcluster.ExitCodeAnnotation, "3").
			PodAnnotation(kwokcluster.FailDurationAnnotation, "3s").
			PodAnnotation(kwokcluster.ShutdownDurationAnnotation, "2s").
			PodFailurePolicy(harness.OnExitCodes(ibjv1.PodFailurePolicyActionRestartJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj()
		w := harness.WatchPods(c, ns, "train", 50*time.Millisecond)
		DeferCleanup(w.Stop)
		Expect(c.Create(ctx, gang)).To(Succeed())
		Expect(c.Get(ctx, client.ObjectKeyFromObject(gang), gang)).To(Succeed())
		podGroup := gang.Name + "-" + string(gang.UID)[:8]

		boundOf := func(g Gomega, generation string) int {
			var pods corev1.PodList
			g.Expect(c.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
			n := 0
			for _, p := range pods.Items {
				g.Expect(p.Spec.SchedulingGroup).NotTo(BeNil(), p.Name)
				g.Expect(p.Spec.SchedulingGroup.PodGroupName).To(Equal(ptr.To(podGroup)), p.Name)
				if p.Labels[ibjv1.RestartAttemptLabel] == generation && p.Spec.NodeName != "" {
					n++
				}
			}
			return n
		}
		By("generation 0: the gang of 4 bound")
		Eventually(func(g Gomega) int { return boundOf(g, "0") }, 30*time.Second, 50*time.Millisecond).Should(Equal(4))
		By("generation 1: after the restart, a gang of 4 bound again")
		Eventually(func(g Gomega) int { return boundOf(g, "1") }, 60*time.Second, 50*time.Millisecond).Should(Equal(4))
		testutil.WaitForJobCondition(ctx, c, ns, "train", ibjv1.ConditionFailed, 60*time.Second)
		var j ibjv1.IndexedBatchJob
		Expect(c.Get(ctx, client.ObjectKeyFromObject(gang), &j)).To(Succeed())
		Expect(harness.ConditionReason(&j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonMaxRestartsExceeded))
		Expect(j.Status.Restarts).To(Equal(int32(1)))
		w.Stop()
		Expect(w.MixedGenerations()).To(BeEmpty())
		Expect(w.Doubles()).To(BeEmpty())
	})
})

// startOperatorOn starts the operator binary against a cluster other than
// the suite's and waits until it is ready.
func startOperatorOn(gc *kwokcluster.Cluster) *controlplane.Process {
	GinkgoHelper()
	proc, err := gc.StartOperator(context.Background(), managerBin)
	Expect(err).NotTo(HaveOccurred())
	return proc
}
