package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// What admission cannot foresee: the API server refuses the pods when they
// are created. envtest's kube-apiserver runs the ResourceQuota admission
// plugin but no quota controller, so the spec writes the quota's status
// (hard and used) as that controller would.
var _ = Describe("Pod creates the API server refuses", func() {

	setQuota := func(hard, used int) {
		q := &corev1.ResourceQuota{}
		Eventually(func() error {
			if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "compute"}, q); err != nil {
				return err
			}
			q.Spec.Hard = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(hard), resource.DecimalSI)}
			if err := k8sClient.Update(ctx, q); err != nil {
				return err
			}
			q.Status.Hard = q.Spec.Hard
			q.Status.Used = corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(used), resource.DecimalSI)}
			return k8sClient.Status().Update(ctx, q)
		}, 10*time.Second).Should(Succeed())
	}

	// createQuota creates the namespace's quota of hard pods, used in part.
	createQuota := func(hard, used int) {
		Expect(k8sClient.Create(ctx, &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "compute", Namespace: ns},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: *resource.NewQuantity(int64(hard), resource.DecimalSI)}},
		})).To(Succeed())
		setQuota(hard, used)
	}

	It("shows a full quota in the status, not Running, retries slowly, and runs once the quota frees", func() {
		createQuota(1, 1)

		failedBefore := failedCreates()
		job := harness.MakeIndexedBatchJob("quota", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()

		By("saying why in the phase (kubectl get's STATUS) and in condition PodCreationFailed, with the API server's message")
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseQuotaExceeded))
			c := apimeta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodCreationFailed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(ibjv1.ReasonQuotaExceeded))
			g.Expect(c.Message).To(And(HavePrefix(`pods "quota-0-0" is forbidden: exceeded quota: compute`), ContainSubstring("limited: pods=1")))
			g.Expect(j.Status.Active).To(BeZero())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(jobPods(ctx, ns, job.Name)).To(BeEmpty())
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement("FailedCreate"))

		By("retrying with a growing delay, not in a hot loop")
		start := failedCreates()
		Expect(start - failedBefore).To(BeNumerically(">=", 2))
		time.Sleep(5 * time.Second)
		// Two pods a try. The delay doubles from 5 ms, which gives about
		// five tries in these 5 s, and a sync that an event of the job
		// brings (its own status write) may add a try or two; a hot loop,
		// even held to the queue's 10 a second, would make a hundred.
		Expect(failedCreates()-start).
			To(BeNumerically("<=", 20), "failed creates in 5 s")
		Expect(getJob(ctx, ns, job.Name).Status.Phase).To(Equal(ibjv1.PhaseQuotaExceeded))

		By("creating the pods once the quota frees, clearing the condition, and completing")
		setQuota(10, 1)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(apimeta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodCreationFailed)).To(BeNil())
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0,1"))
			g.Expect(j.Status.Failed).To(BeZero(), "a refused create is no failed pod")
		}, timeout, 100*time.Millisecond).Should(Succeed())
		expectNoFinalizers(ctx, ns, job.Name)
		Expect(k.Doubles()).To(BeEmpty())
	})

	It("waits retryBackoff.createRefusedDelaySeconds between tries after a refused create", func() {
		createQuota(1, 1)
		job := harness.MakeIndexedBatchJob("quota-wait", ns).Completions(1).Obj()
		job.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To[int32](4)}
		failed := func() float64 {
			return failedCreates()
		}
		before := failed()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		Eventually(func() ibjv1.Phase { return getJob(ctx, ns, job.Name).Status.Phase }, timeout, 100*time.Millisecond).
			Should(Equal(ibjv1.PhaseQuotaExceeded))

		By("trying again only after the delay, whatever syncs the job's own status writes bring")
		first := failed()
		Expect(first-before).To(Equal(1.0), "one create a try (slow start stops at the first refusal)")
		Consistently(failed, 3*time.Second, 100*time.Millisecond).Should(Equal(first))
		Eventually(failed, 5*time.Second, 100*time.Millisecond).Should(Equal(first + 1))

		By("creating the pod at the next try once the quota frees")
		setQuota(10, 1)
		expectCompleted(ctx, ns, job.Name, 1, "0", 15*time.Second)
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("shows a pod forbidden by Pod Security as PodForbidden, and runs once the namespace allows it", func() {
		nsObj := &corev1.Namespace{}
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
		nsObj.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
		Expect(k8sClient.Update(ctx, nsObj)).To(Succeed())

		job := harness.MakeIndexedBatchJob("psa", ns).Completions(1).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhasePodForbidden))
			c := apimeta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodCreationFailed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Message).To(ContainSubstring(`violates PodSecurity "restricted:latest"`))
		}, timeout, 100*time.Millisecond).Should(Succeed())

		By("relaxing the namespace's level")
		Expect(k8sClient.Get(ctx, client.ObjectKey{Name: ns}, nsObj)).To(Succeed())
		nsObj.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
		Expect(k8sClient.Update(ctx, nsObj)).To(Succeed())
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseComplete))
			g.Expect(apimeta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodCreationFailed)).To(BeNil())
		}, 2*timeout, 100*time.Millisecond).Should(Succeed())
	})

	It("sends tens of refused creates for a job of parallelism 5000 against a full quota, not thousands", func() {
		// The quota admission plugin counts each pod it admits into the
		// quota's usage, as the quota controller would find it.
		createQuota(20, 0)
		failed := func() float64 {
			return failedCreates()
		}
		before := failed()
		job := harness.MakeIndexedBatchJob("wide", ns).Completions(5000).Parallelism(5000).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{Hold: true} })
		defer k.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseQuotaExceeded))
			g.Expect(j.Status.Active).To(Equal(int32(20)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		time.Sleep(10 * time.Second)
		// Slow start: the first sync's batches of 1, 2, 4, 8 and 16 stop at
		// the first refusal, and every retry sends one create that the
		// quota refuses. Sending the whole parallelism would refuse
		// hundreds a try.
		Expect(failed()-before).To(BeNumerically("<", 60), "creates refused in the job's first 10 s and more")
		Expect(jobPods(ctx, ns, job.Name)).To(HaveLen(20))
	})
})

// failedCreates is the operator's count of pod creates the API server
// refused.
func failedCreates() float64 {
	return metricValue("indexedbatchjob_pods_creation_total", map[string]string{"status": "failed"})
}
