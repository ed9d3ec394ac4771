package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

var _ = Describe("Hostile and odd pods", func() {

	// strayPod is a pod that looks like one of the job's, with the given
	// index label; owned says whether it is controlled by the job.
	strayPod := func(job *ibjv1.IndexedBatchJob, name, index string, owned bool) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{
				Name: name, Namespace: job.Namespace,
				Labels: map[string]string{
					ibjv1.JobNameLabel:         job.Name,
					ibjv1.ControllerUIDLabel:   string(job.UID),
					ibjv1.CompletionIndexLabel: index,
				},
				Finalizers: []string{ibjv1.TrackingFinalizer},
			},
			Spec: *job.Spec.Template.Spec.DeepCopy(),
		}
		if owned {
			p.OwnerReferences = []metav1.OwnerReference{{
				APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob",
				Name: job.Name, UID: job.UID, Controller: ptr.To(true),
			}}
		}
		Expect(k8sClient.Create(ctx, p)).To(Succeed())
		return p
	}
	finishedExactly := func(job *ibjv1.IndexedBatchJob, completions int32) {
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Succeeded).To(Equal(completions))
			g.Expect(j.Status.Failed).To(BeZero())
		}, timeout, 100*time.Millisecond).Should(Succeed())
	}

	It("deletes pods with a malformed or out-of-range index without counting them", func() {
		job := harness.MakeIndexedBatchJob("bad-index", ns).Completions(2).Parallelism(2).Suspend(true).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		job = getJob(ctx, ns, job.Name)
		strayPod(job, "bad-index-abc", "abc", true)
		strayPod(job, "bad-index-99", "99", true)
		strayPod(job, "bad-index-lead", "007", true)
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		setSuspend(ctx, ns, job.Name, false)

		finishedExactly(job, 2)
		Eventually(func() []string {
			pods := jobPods(ctx, ns, job.Name)
			names := make([]string, 0, len(pods))
			for _, p := range pods {
				names = append(names, p.Name)
			}
			return names
		}, 20*time.Second).Should(And(
			Not(ContainElement("bad-index-abc")), Not(ContainElement("bad-index-99")), Not(ContainElement("bad-index-lead"))))
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement("InvalidPodIndex"))
	})

	It("never counts a pod it does not control, and releases its finalizer", func() {
		job := harness.MakeIndexedBatchJob("foreign", ns).Completions(2).Parallelism(2).Suspend(true).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		job = getJob(ctx, ns, job.Name)
		foreign := strayPod(job, "foreign-0-impostor", "0", false)
		// The operator may let it go (a patch) before its status is written.
		Eventually(func() error {
			if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(foreign), foreign); err != nil {
				return err
			}
			foreign.Status.Phase = corev1.PodSucceeded
			return k8sClient.Status().Update(ctx, foreign)
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		setSuspend(ctx, ns, job.Name, false)

		finishedExactly(job, 2)
		Expect(k.RunsOf(0)).To(Equal(2), "the impostor and the real pod of index 0")
		Eventually(func() []string {
			p := &corev1.Pod{}
			Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(foreign), p)).To(Succeed())
			return p.Finalizers
		}, 20*time.Second).Should(BeEmpty())
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement("ForeignPod"))
	})

	It("starts its own pods at once when re-created under the name of a job whose pods are still there", func() {
		job := harness.MakeIndexedBatchJob("again", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		stay := true
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{Hold: stay} })
		defer k.Stop()
		Eventually(func() int32 { return getJob(ctx, ns, job.Name).Status.Active }, timeout).Should(Equal(int32(2)))
		old := getJob(ctx, ns, job.Name)
		// envtest runs no garbage collector: the old job's pods stay, as
		// they do for a while on a cluster, holding the names again-0-0 and
		// again-1-0.
		Expect(k8sClient.Delete(ctx, old)).To(Succeed())
		Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKeyFromObject(old), &ibjv1.IndexedBatchJob{}) }, timeout).
			Should(Satisfy(apierrors.IsNotFound))

		again := harness.MakeIndexedBatchJob("again", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, again)).To(Succeed())
		again = getJob(ctx, ns, again.Name)
		Eventually(func(g Gomega) {
			var own []string
			for _, p := range jobPods(ctx, ns, again.Name) {
				if ref := metav1.GetControllerOf(&p); ref != nil && ref.UID == again.UID {
					own = append(own, p.Name)
				}
			}
			g.Expect(own).To(ConsistOf("again-0-1", "again-1-1"), "the new job's own pods, named past the old ones")
			g.Expect(getJob(ctx, ns, again.Name).Status.Active).To(Equal(int32(2)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		stay = false
		finishedExactly(again, 2)
	})

	It("does not count a pod that holds its pod's name without being its own, and names the index's pod past it", func() {
		job := harness.MakeIndexedBatchJob("taken", ns).Completions(1).Obj()
		squatter := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "taken-0-0", Namespace: ns},
			Spec:       *job.Spec.Template.Spec.DeepCopy(),
		}
		Expect(k8sClient.Create(ctx, squatter)).To(Succeed())
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()

		finishedExactly(job, 1)
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement("PodNameTaken"))
		Expect(jobPods(ctx, ns, job.Name)).To(ContainElement(HaveField("Name", "taken-0-1")))
		Expect(k.RunsOf(0)).To(Equal(1), "only the job's own pod of index 0 ran")
	})

	It("keeps one pod per index when someone adds a second pod for an index", func() {
		job := harness.MakeIndexedBatchJob("dup", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		stay := true
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{Hold: stay} })
		defer k.Stop()
		Eventually(func() int32 { return getJob(ctx, ns, job.Name).Status.Active }, timeout).Should(Equal(int32(2)))
		dup := strayPod(getJob(ctx, ns, job.Name), "dup-0-9", "0", true)
		dup.Annotations = nil

		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, timeout).Should(ContainElement("DuplicatePodIndex"))
		stay = false
		finishedExactly(job, 2)
	})

	It("recovers completedIndexes from the pods when a user overwrites it with garbage", func() {
		job := harness.MakeIndexedBatchJob("tampered", ns).Completions(3).Parallelism(1).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		release := make(chan struct{})
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix == 2 {
				select {
				case <-release:
				default:
					return podsim.Plan{Hold: true}
				}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func() string { return getJob(ctx, ns, job.Name).Status.CompletedIndexes }, timeout).Should(Equal("0,1"))

		By("overwriting status.completedIndexes")
		Eventually(func() error {
			j := getJob(ctx, ns, job.Name)
			j.Status.CompletedIndexes = "zero,one"
			return k8sClient.Status().Update(ctx, j)
		}, 10*time.Second).Should(Succeed())
		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, timeout).Should(ContainElement("InvalidStatus"))
		Eventually(func() string { return getJob(ctx, ns, job.Name).Status.CompletedIndexes }, timeout).Should(Equal("0,1"))

		close(release)
		finishedExactly(job, 3)
		for ix := range 3 {
			Expect(k.RunsOf(ix)).To(Equal(1), "index %d ran again after the tampering", ix)
		}
	})
})
