package kueue_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

const (
	queueNameLabel     = "kueue.x-k8s.io/queue-name"
	priorityClassLabel = "kueue.x-k8s.io/priority-class"
	flavorNodeLabel    = "example.com/pool"
	timeout            = 60 * time.Second
)

// flavorToleration is what the flavor's nodes need and admission adds to
// the template.
var flavorToleration = corev1.Toleration{Key: "example.com/batch", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// Each spec gets its own namespace, ResourceFlavor, ClusterQueue (with
// quota for cpus pods of one cpu each) and LocalQueue "queue".
var (
	ns   string
	spec int
)

var _ = BeforeEach(func() {
	spec++
	ns = testutil.NewNamespace(ctx, k8sClient, testutil.NamespaceOptions{Prefix: "ibj-kueue-", OnFailure: dumpNamespace})
})

// makeQueues creates a flavor whose nodes carry flavorNodeLabel and need
// flavorToleration, a ClusterQueue with quota for cpus cpus on it
// (preempting lower priorities within the queue), and LocalQueue "queue"
// in ns, unless localQueue is false.
func makeQueues(cpus int, localQueue bool) string {
	GinkgoHelper()
	name := fmt.Sprintf("spec-%d", spec)
	q := testutil.Queue{
		Name: name, CPU: *resource.NewQuantity(int64(cpus), resource.DecimalSI),
		Flavor: kueuev1beta2.ResourceFlavorSpec{
			NodeLabels:  map[string]string{flavorNodeLabel: name},
			Tolerations: []corev1.Toleration{flavorToleration},
		},
		Preemption: &kueuev1beta2.ClusterQueuePreemption{WithinClusterQueue: kueuev1beta2.PreemptionPolicyLowerPriority},
	}
	if localQueue {
		q.LocalQueue = &client.ObjectKey{Namespace: ns, Name: "queue"}
	}
	testutil.CreateQueue(ctx, k8sClient, q, 0)
	return name
}

// makeLocalQueue creates LocalQueue "queue" in ns, for ClusterQueue cq.
func makeLocalQueue(cq string) {
	GinkgoHelper()
	Expect(k8sClient.Create(ctx, &kueuev1beta2.LocalQueue{
		ObjectMeta: metav1.ObjectMeta{Name: "queue", Namespace: ns},
		Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(cq)},
	})).To(Succeed())
}

// queuedJob is a job for LocalQueue "queue" whose pods ask for one cpu.
func queuedJob(name string, completions, parallelism int32) *harness.JobWrapper {
	return harness.MakeIndexedBatchJob(name, ns).Completions(completions).Parallelism(parallelism).
		Label(queueNameLabel, "queue").
		Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")})
}

// gate holds the pods of chosen indexes running until it opens them.
type gate struct {
	mu     sync.Mutex
	held   map[int]bool
	opened map[int]bool
}

func holding(indexes ...int) *gate {
	g := &gate{held: map[int]bool{}, opened: map[int]bool{}}
	for _, i := range indexes {
		g.held[i] = true
	}
	return g
}

func (g *gate) open(indexes ...int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, i := range indexes {
		g.opened[i] = true
	}
}

func (g *gate) plan(index, _ int) podsim.Plan {
	g.mu.Lock()
	defer g.mu.Unlock()
	return podsim.Plan{Run: 200 * time.Millisecond, Hold: g.held[index] && !g.opened[index]}
}

// startKubelet plays the kubelet for job's pods, ending each as g says.
func startKubelet(job string, g *gate) *podsim.Simulator {
	GinkgoHelper()
	k := podsim.New(podsim.ForJob(env.Clientset, ns, job, g.plan))
	Expect(k.Run(context.Background())).To(Succeed())
	DeferCleanup(k.Stop)
	return k
}

func getJob(name string) *ibjv1.IndexedBatchJob {
	job := &ibjv1.IndexedBatchJob{}
	ExpectWithOffset(1, k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, job)).To(Succeed())
	return job
}

// workloadOf is the Workload Kueue's reconciler made for job, or nil.
func workloadOf(g Gomega, job string) *kueuev1beta2.Workload {
	uid := getJob(job).UID
	var list kueuev1beta2.WorkloadList
	g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
	for i := range list.Items {
		for _, o := range list.Items[i].OwnerReferences {
			if o.UID == uid {
				return &list.Items[i]
			}
		}
	}
	return nil
}

func hasCondition(wl *kueuev1beta2.Workload, t string) bool {
	return wl != nil && apimeta.IsStatusConditionTrue(wl.Status.Conditions, t)
}

// pods lists job's pods that have not finished.
func runningPods(job string) []corev1.Pod {
	var list corev1.PodList
	ExpectWithOffset(1, k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job})).To(Succeed())
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// completed is true once the job is Complete.
func completed(job string) func(g Gomega) {
	return func(g Gomega) {
		j := getJob(job)
		g.Expect(apimeta.IsStatusConditionTrue(j.Status.Conditions, ibjv1.ConditionComplete)).To(BeTrue(), "condition Complete of %s", job)
	}
}

var _ = Describe("IndexedBatchJob queued by Kueue", func() {
	It("is created suspended and runs once Kueue admits its Workload, with the flavor's node selector and tolerations", func() {
		cq := makeQueues(3, false)
		job := queuedJob("admitted", 4, 2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		// The webhook's answer: stored suspended.
		Expect(ptr.Deref(job.Spec.Suspend, false)).To(BeTrue(), "created suspended")
		k := startKubelet("admitted", holding())

		By("one PodSet, count = parallelism, with the template's requests")
		var wl *kueuev1beta2.Workload
		Eventually(func(g Gomega) {
			wl = workloadOf(g, "admitted")
			g.Expect(wl).NotTo(BeNil())
		}, timeout).Should(Succeed())
		Expect(wl.Spec.PodSets).To(HaveLen(1))
		Expect(wl.Spec.PodSets[0].Count).To(Equal(int32(2)))
		Expect(wl.Spec.PodSets[0].Template.Spec.Containers[0].Resources.Requests.Cpu().String()).To(Equal("1"))
		Expect(wl.Spec.QueueName).To(Equal(kueuev1beta2.LocalQueueName("queue")))

		By("no LocalQueue yet: not admitted, no pod")
		Consistently(func(g Gomega) {
			g.Expect(ptr.Deref(getJob("admitted").Spec.Suspend, false)).To(BeTrue())
			g.Expect(runningPods("admitted")).To(BeEmpty())
		}, 2*time.Second).Should(Succeed())

		By("the LocalQueue: admitted, started on the flavor")
		makeLocalQueue(cq)
		Eventually(func(g Gomega) {
			j := getJob("admitted")
			g.Expect(ptr.Deref(j.Spec.Suspend, true)).To(BeFalse())
			g.Expect(j.Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue(flavorNodeLabel, cq))
			g.Expect(j.Spec.Template.Spec.Tolerations).To(ContainElement(flavorToleration))
		}, timeout).Should(Succeed())
		Eventually(func(g Gomega) {
			pods := runningPods("admitted")
			g.Expect(pods).NotTo(BeEmpty())
			g.Expect(pods[0].Spec.NodeSelector).To(HaveKeyWithValue(flavorNodeLabel, cq))
			g.Expect(pods[0].Spec.Tolerations).To(ContainElement(flavorToleration))
		}, timeout).Should(Succeed())

		Eventually(completed("admitted"), timeout).Should(Succeed())
		j := getJob("admitted")
		Expect(j.Status.Succeeded).To(Equal(int32(4)))
		Expect(j.Status.Failed).To(Equal(int32(0)))
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 2))
		Eventually(func(g Gomega) {
			g.Expect(hasCondition(workloadOf(g, "admitted"), kueuev1beta2.WorkloadFinished)).To(BeTrue())
		}, timeout).Should(Succeed())
	})

	It("queues a second job until the first gives its quota back, index by index (reclaimable pods)", func() {
		makeQueues(2, true)
		first := holding(0, 1, 2)
		startKubelet("first", first)
		startKubelet("second", holding())
		Expect(k8sClient.Create(ctx, queuedJob("first", 3, 2).Obj())).To(Succeed())
		Eventually(func() []corev1.Pod { return runningPods("first") }, timeout).Should(HaveLen(2))

		By("the second job waits for quota, suspended")
		Expect(k8sClient.Create(ctx, queuedJob("second", 1, 1).Obj())).To(Succeed())
		Eventually(func(g Gomega) {
			wl := workloadOf(g, "second")
			g.Expect(wl).NotTo(BeNil())
			c := apimeta.FindStatusCondition(wl.Status.Conditions, kueuev1beta2.WorkloadQuotaReserved)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		}, timeout).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(ptr.Deref(getJob("second").Spec.Suspend, false)).To(BeTrue())
			g.Expect(runningPods("second")).To(BeEmpty())
		}, 2*time.Second).Should(Succeed())

		By("indexes 0 and 1 finish: one index left for a parallelism of 2, one pod's quota given back")
		first.open(0, 1)
		Eventually(func(g Gomega) {
			g.Expect(workloadOf(g, "first").Status.ReclaimablePods).To(Equal([]kueuev1beta2.ReclaimablePod{{Name: kueuev1beta2.DefaultPodSetName, Count: 1}}))
		}, timeout).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(ptr.Deref(getJob("second").Spec.Suspend, true)).To(BeFalse())
		}, timeout).Should(Succeed())
		// The first job's last index still runs beside the second job.
		Expect(getJob("first").Status.CompletedIndexes).To(Equal("0,1"))
		Expect(runningPods("first")).To(HaveLen(1))

		Eventually(completed("second"), timeout).Should(Succeed())
		first.open(2)
		Eventually(completed("first"), timeout).Should(Succeed())
		Expect(getJob("first").Status.Succeeded).To(Equal(int32(3)))
	})

	It("runs with a smaller parallelism when Kueue admits it partially", func() {
		makeQueues(3, true)
		g := holding(0, 1, 2, 3, 4)
		k := startKubelet("partial", g)
		job := queuedJob("partial", 5, 5).Annotation(ibjkueue.MinParallelismAnnotation, "2").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		Eventually(func(g Gomega) {
			j := getJob("partial")
			g.Expect(ptr.Deref(j.Spec.Suspend, true)).To(BeFalse())
			g.Expect(ptr.Deref(j.Spec.Parallelism, 0)).To(Equal(int32(3)))
		}, timeout).Should(Succeed())
		Eventually(func(g Gomega) {
			wl := workloadOf(g, "partial")
			g.Expect(wl.Status.Admission).NotTo(BeNil())
			g.Expect(ptr.Deref(wl.Status.Admission.PodSetAssignments[0].Count, 0)).To(Equal(int32(3)))
		}, timeout).Should(Succeed())
		Eventually(func() []corev1.Pod { return runningPods("partial") }, timeout).Should(HaveLen(3))
		Consistently(func() []corev1.Pod { return runningPods("partial") }, time.Second).Should(HaveLen(3))

		g.open(0, 1, 2, 3, 4)
		Eventually(completed("partial"), timeout).Should(Succeed())
		Expect(getJob("partial").Status.Succeeded).To(Equal(int32(5)))
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 3))
	})

	It("is preempted by a higher-priority job: suspended, pods deleted uncounted, template restored, resumed later with exact counts", func() {
		cq := makeQueues(2, true)
		for name, value := range map[string]int32{fmt.Sprintf("low-%d", spec): 10, fmt.Sprintf("high-%d", spec): 100} {
			Expect(k8sClient.Create(ctx, &kueuev1beta2.WorkloadPriorityClass{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value,
			})).To(Succeed())
		}
		low := holding(1, 2, 3)
		lowKubelet := startKubelet("low", low)
		startKubelet("high", holding())
		lowJob := queuedJob("low", 4, 2).Label(priorityClassLabel, fmt.Sprintf("low-%d", spec)).Obj()
		Expect(k8sClient.Create(ctx, lowJob)).To(Succeed())
		Eventually(func(g Gomega) {
			j := getJob("low")
			g.Expect(j.Status.Succeeded).To(Equal(int32(1)))
			g.Expect(j.Status.Active).To(Equal(int32(2)))
		}, timeout).Should(Succeed())
		Expect(getJob("low").Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue(flavorNodeLabel, cq))

		By("a higher-priority job takes the quota")
		highJob := queuedJob("high", 2, 2).Label(priorityClassLabel, fmt.Sprintf("high-%d", spec)).Obj()
		Expect(k8sClient.Create(ctx, highJob)).To(Succeed())
		Eventually(func(g Gomega) {
			j := getJob("low")
			g.Expect(ptr.Deref(j.Spec.Suspend, false)).To(BeTrue())
			g.Expect(apimeta.IsStatusConditionTrue(j.Status.Conditions, ibjv1.ConditionSuspended)).To(BeTrue())
			g.Expect(j.Status.Active).To(BeZero())
			g.Expect(j.Status.StartTime).To(BeNil())
			// What admission added is gone again.
			g.Expect(j.Spec.Template.Spec.NodeSelector).NotTo(HaveKey(flavorNodeLabel))
			g.Expect(j.Spec.Template.Spec.Tolerations).NotTo(ContainElement(flavorToleration))
		}, timeout).Should(Succeed())
		j := getJob("low")
		Expect(j.Status.Failed).To(BeZero(), "pods deleted by the preemption are not failures")
		Expect(j.Status.Succeeded).To(Equal(int32(1)))
		Expect(j.Status.CompletedIndexes).To(Equal("0"))
		Eventually(func(g Gomega) {
			g.Expect(hasCondition(workloadOf(g, "low"), kueuev1beta2.WorkloadEvicted)).To(BeTrue())
		}, timeout).Should(Succeed())

		By("the higher-priority job finishes, the preempted one is admitted again and resumes")
		Eventually(completed("high"), timeout).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(ptr.Deref(getJob("low").Spec.Suspend, true)).To(BeFalse())
		}, timeout).Should(Succeed())
		low.open(1, 2, 3)
		Eventually(completed("low"), timeout).Should(Succeed())
		j = getJob("low")
		Expect(j.Status.Succeeded).To(Equal(int32(4)))
		Expect(j.Status.Failed).To(BeZero())
		Expect(j.Status.CompletedIndexes).To(Equal("0-3"))
		Expect(lowKubelet.RunsOf(0)).To(Equal(1), "a finished index does not run again")
		Expect(lowKubelet.Doubles()).To(BeEmpty(), "no index ran twice at once")
	})

	It("leaves a job managed by MultiKueue to MultiKueue", func() {
		makeQueues(2, true)
		job := queuedJob("remote", 2, 2).ManagedBy(kueuev1beta2.MultiKueueControllerName).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		Expect(ptr.Deref(job.Spec.Suspend, false)).To(BeTrue(), "created suspended")
		// Admitted here, so Kueue unsuspends it: MultiKueue would run it on
		// a worker cluster; this operator creates nothing.
		Eventually(func(g Gomega) {
			g.Expect(hasCondition(workloadOf(g, "remote"), kueuev1beta2.WorkloadAdmitted)).To(BeTrue())
			g.Expect(ptr.Deref(getJob("remote").Spec.Suspend, true)).To(BeFalse())
		}, timeout).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(runningPods("remote")).To(BeEmpty())
			g.Expect(getJob("remote").Status.StartTime).To(BeNil())
		}, 3*time.Second).Should(Succeed())
	})
})

// The suite's integration runs with manageJobsWithoutQueueName on and
// Kueue's default managedJobsNamespaceSelector (suite_test.go); the
// integration with the setting off is test/integration/kueuestart's.
var _ = Describe("Memory after an OOM kill under Kueue", func() {
	It("never raises a pod's memory request past what Kueue admitted: only the limit grows, and an event says so", func() {
		name := fmt.Sprintf("oom-%d", spec)
		Expect(k8sClient.Create(ctx, &kueuev1beta2.ResourceFlavor{ObjectMeta: metav1.ObjectMeta{Name: name}})).To(Succeed())
		Expect(k8sClient.Create(ctx, &kueuev1beta2.ClusterQueue{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: kueuev1beta2.ClusterQueueSpec{
				NamespaceSelector: &metav1.LabelSelector{},
				ResourceGroups: []kueuev1beta2.ResourceGroup{{
					CoveredResources: []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory},
					Flavors: []kueuev1beta2.FlavorQuotas{{
						Name: kueuev1beta2.ResourceFlavorReference(name),
						Resources: []kueuev1beta2.ResourceQuota{
							{Name: corev1.ResourceCPU, NominalQuota: resource.MustParse("4")},
							{Name: corev1.ResourceMemory, NominalQuota: resource.MustParse("4Gi")},
						},
					}},
				}},
			},
		})).To(Succeed())
		makeLocalQueue(name)
		// Index 0's first pod is OOM-killed; every other pod succeeds.
		k := podsim.New(podsim.ForJob(env.Clientset, ns, "oom", func(index, attempt int) podsim.Plan {
			return podsim.Plan{Run: 200 * time.Millisecond, OOMKilled: index == 0 && attempt == 0}
		}))
		Expect(k.Run(context.Background())).To(Succeed())
		DeferCleanup(k.Stop)
		job := queuedJob("oom", 2, 1).RetryBackoff(0, 0).RetryOnOOMKilled(200, "2Gi").Obj()
		job.Spec.Template.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("512Mi")
		job.Spec.Template.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		Eventually(completed("oom"), timeout).Should(Succeed())
		var admitted resource.Quantity
		Eventually(func(g Gomega) {
			wl := workloadOf(g, "oom")
			g.Expect(wl.Status.Admission).NotTo(BeNil())
			psa := wl.Status.Admission.PodSetAssignments[0]
			g.Expect(ptr.Deref(psa.Count, 0)).To(Equal(int32(1)))
			admitted = psa.ResourceUsage[corev1.ResourceMemory]
		}, timeout).Should(Succeed())
		Expect(admitted.String()).To(Equal("512Mi"), "Kueue admitted the template's request for the one pod")

		raised := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "oom-0-1"}, raised)).To(Succeed())
		res := raised.Spec.Containers[0].Resources
		Expect(ptr.To(res.Requests[corev1.ResourceMemory]).String()).To(Equal(admitted.String()), "the request stays at what Kueue admitted")
		Expect(ptr.To(res.Limits[corev1.ResourceMemory]).String()).To(Equal("2Gi"), "the limit is raised (1Gi x 2)")
		Expect(raised.Annotations).To(HaveKeyWithValue(ibjv1.OOMKillsAnnotation, "1"))

		Eventually(func(g Gomega) {
			var list eventsv1.EventList
			g.Expect(k8sClient.List(ctx, &list, client.InNamespace(ns))).To(Succeed())
			var notes []string
			for _, e := range list.Items {
				if e.Regarding.Name == "oom" {
					notes = append(notes, e.Reason+": "+e.Note)
				}
			}
			g.Expect(notes).To(ContainElement("MemoryRaiseHeldBack: Kept the memory requests of containers main of pod oom-0-1 (index 0) " +
				"at the template's, which is what Kueue admitted; only their limits were raised"))
		}, timeout).Should(Succeed())
	})
})

var _ = Describe("IndexedBatchJob restarting its pods together under Kueue", func() {
	It("keeps its admission across a restart: never suspended, never evicted, the same quota", func() {
		makeQueues(3, true)
		// Index 1's first pod exits 3 after 1 s, which restarts the job's
		// pods; every other pod runs 2 s and succeeds.
		k := podsim.New(podsim.ForJob(env.Clientset, ns, "group", func(index, attempt int) podsim.Plan {
			if index == 1 && attempt == 0 {
				return podsim.Plan{Run: time.Second, ExitCode: 3}
			}
			return podsim.Plan{Run: 2 * time.Second}
		}))
		Expect(k.Run(context.Background())).To(Succeed())
		DeferCleanup(k.Stop)
		job := queuedJob("group", 3, 3).MaxRestarts(2).
			PodFailurePolicy(harness.OnExitCodes(ibjv1.PodFailurePolicyActionRestartJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		var admitted *kueuev1beta2.Workload
		Eventually(func(g Gomega) {
			admitted = workloadOf(g, "group")
			g.Expect(admitted).NotTo(BeNil())
			g.Expect(admitted.Status.Admission).NotTo(BeNil())
		}, timeout).Should(Succeed())

		By("the restart: no suspend while it runs")
		Eventually(func(g Gomega) {
			j := getJob("group")
			g.Expect(ptr.Deref(j.Spec.Suspend, false)).To(BeFalse(), "suspended during the restart")
			g.Expect(j.Status.Restarts).To(Equal(int32(1)))
		}, timeout, 20*time.Millisecond).Should(Succeed())
		Eventually(completed("group"), timeout).Should(Succeed())
		j := getJob("group")
		Expect(j.Status.Restarts).To(Equal(int32(1)))
		Expect(j.Status.Succeeded).To(Equal(int32(3)))
		Expect(j.Status.Failed).To(Equal(int32(0)))

		By("the same Workload, admitted once, never evicted or requeued")
		var wl *kueuev1beta2.Workload
		Eventually(func(g Gomega) {
			wl = workloadOf(g, "group")
			g.Expect(hasCondition(wl, kueuev1beta2.WorkloadFinished)).To(BeTrue())
		}, timeout).Should(Succeed())
		Expect(wl.UID).To(Equal(admitted.UID))
		Expect(wl.Status.Admission).To(Equal(admitted.Status.Admission))
		Expect(apimeta.FindStatusCondition(wl.Status.Conditions, kueuev1beta2.WorkloadEvicted)).To(BeNil(), "conditions %v", wl.Status.Conditions)
		Expect(wl.Status.RequeueState).To(BeNil())
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 3))
	})
})

var _ = Describe("Kueue's manageJobsWithoutQueueName and managedJobsNamespaceSelector", func() {
	It("queues a job without a queue name in a selected namespace in its LocalQueue default: created suspended, admitted, run", func() {
		cq := makeQueues(2, false)
		Expect(k8sClient.Create(ctx, &kueuev1beta2.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns},
			Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(cq)},
		})).To(Succeed())
		k := startKubelet("unlabelled", holding())
		job := harness.MakeIndexedBatchJob("unlabelled", ns).Completions(3).Parallelism(2).
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		// The webhook's answer, as Kueue's job webhook would give it.
		Expect(ptr.Deref(job.Spec.Suspend, false)).To(BeTrue(), "created suspended")
		Expect(job.Labels).To(HaveKeyWithValue(queueNameLabel, "default"))

		Eventually(func(g Gomega) {
			wl := workloadOf(g, "unlabelled")
			g.Expect(wl).NotTo(BeNil())
			g.Expect(wl.Spec.QueueName).To(Equal(kueuev1beta2.LocalQueueName("default")))
			g.Expect(hasCondition(wl, kueuev1beta2.WorkloadAdmitted)).To(BeTrue())
		}, timeout).Should(Succeed())
		Eventually(completed("unlabelled"), timeout).Should(Succeed())
		Expect(getJob("unlabelled").Status.Succeeded).To(Equal(int32(3)))
		Expect(getJob("unlabelled").Spec.Template.Spec.NodeSelector).To(HaveKeyWithValue(flavorNodeLabel, cq))
		Expect(k.PeakUnfinished()).To(BeNumerically("<=", 2))
	})

	It("holds a job without a queue name suspended, its Workload in no LocalQueue, until it is given one", func() {
		makeQueues(2, true)
		startKubelet("waiting", holding())
		job := harness.MakeIndexedBatchJob("waiting", ns).Completions(1).
			Requests(corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		Expect(ptr.Deref(job.Spec.Suspend, false)).To(BeTrue(), "created suspended")
		Expect(job.Labels).NotTo(HaveKey(queueNameLabel), "the namespace has no LocalQueue default")

		Eventually(func(g Gomega) {
			wl := workloadOf(g, "waiting")
			g.Expect(wl).NotTo(BeNil())
			g.Expect(wl.Spec.QueueName).To(BeEmpty())
		}, timeout).Should(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(ptr.Deref(getJob("waiting").Spec.Suspend, false)).To(BeTrue())
			g.Expect(runningPods("waiting")).To(BeEmpty())
			g.Expect(hasCondition(workloadOf(g, "waiting"), kueuev1beta2.WorkloadQuotaReserved)).To(BeFalse())
		}, 2*time.Second).Should(Succeed())

		By("labelled with a LocalQueue: its Workload moves there, is admitted, and the job runs")
		Eventually(func() error {
			j := getJob("waiting")
			metav1.SetMetaDataLabel(&j.ObjectMeta, queueNameLabel, "queue")
			return k8sClient.Update(ctx, j)
		}, timeout).Should(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(workloadOf(g, "waiting").Spec.QueueName).To(Equal(kueuev1beta2.LocalQueueName("queue")))
		}, timeout).Should(Succeed())
		Eventually(completed("waiting"), timeout).Should(Succeed())
	})

	It("leaves jobs in a namespace outside managedJobsNamespaceSelector alone, with or without a queue name", func() {
		// kueue-system, which Kueue's default selector leaves out.
		err := k8sClient.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}})
		Expect(client.IgnoreAlreadyExists(err)).To(Succeed())
		ns = "kueue-system"
		makeQueues(2, true)
		for _, job := range []*ibjv1.IndexedBatchJob{
			harness.MakeIndexedBatchJob(fmt.Sprintf("plain-%d", spec), ns).Completions(2).Parallelism(2).Obj(),
			queuedJob(fmt.Sprintf("labelled-%d", spec), 2, 2).Obj(),
		} {
			startKubelet(job.Name, holding())
			Expect(k8sClient.Create(ctx, job)).To(Succeed())
			Expect(ptr.Deref(job.Spec.Suspend, false)).To(BeFalse(), "%s created as it is", job.Name)
			Eventually(completed(job.Name), timeout).Should(Succeed())
			Expect(getJob(job.Name).Spec.Template.Spec.NodeSelector).NotTo(HaveKey(flavorNodeLabel), "%s never admitted", job.Name)
			Consistently(func(g Gomega) { g.Expect(workloadOf(g, job.Name)).To(BeNil()) }, time.Second).Should(Succeed())
		}
	})
})

// dumpNamespace prints what a failed spec left behind.
func dumpNamespace(ns string) {
	c := context.Background()
	var jobs ibjv1.IndexedBatchJobList
	_ = k8sClient.List(c, &jobs, client.InNamespace(ns))
	for _, j := range jobs.Items {
		GinkgoWriter.Printf("job %s: suspend=%v parallelism=%v spec.template.nodeSelector=%v status=%+v\n",
			j.Name, ptr.Deref(j.Spec.Suspend, false), ptr.Deref(j.Spec.Parallelism, 0), j.Spec.Template.Spec.NodeSelector, j.Status)
	}
	var wls kueuev1beta2.WorkloadList
	_ = k8sClient.List(c, &wls, client.InNamespace(ns))
	for _, w := range wls.Items {
		GinkgoWriter.Printf("workload %s: conditions=%+v admission=%+v reclaimable=%+v\n", w.Name, w.Status.Conditions, w.Status.Admission, w.Status.ReclaimablePods)
	}
	var pods corev1.PodList
	_ = k8sClient.List(c, &pods, client.InNamespace(ns))
	for _, p := range pods.Items {
		GinkgoWriter.Printf("pod %s: phase=%s deleting=%v\n", p.Name, p.Status.Phase, p.DeletionTimestamp != nil)
	}
}
