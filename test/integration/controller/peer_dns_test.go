package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// Peer DNS (spec.network): the job's own headless Service. envtest runs no
// endpoints controller and no garbage collector, so the specs check what
// those act on: the Service's selector against the pods' labels, and the
// owner reference that deletes the Service with the job.
var _ = Describe("Peer DNS", func() {

	runForever := func(int, int) podsim.Plan { return podsim.Plan{Hold: true} }

	It("gives a 2-index TensorFlow-style job a headless Service that selects exactly its pods", func() {
		job := harness.MakeIndexedBatchJob("tf", ns).Completions(2).Parallelism(2).
			PodReplacementPolicy(batchv1.Failed).PeerDNS("").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		other := harness.MakeIndexedBatchJob("tf-other", ns).Completions(1).Obj()
		Expect(k8sClient.Create(ctx, other)).To(Succeed())
		k := startKubelet(ns, job.Name, runForever)
		defer k.Stop()
		ko := startKubelet(ns, other.Name, runForever)
		defer ko.Stop()

		var pods []corev1.Pod
		Eventually(func(g Gomega) {
			pods = jobPods(ctx, ns, job.Name)
			g.Expect(pods).To(HaveLen(2))
			g.Expect(jobPods(ctx, ns, other.Name)).To(HaveLen(1))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		job = getJob(ctx, ns, job.Name)

		By("creating one headless Service, named after the job, controlled by it")
		svc := &corev1.Service{}
		Eventually(func() error { return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tf"}, svc) }, timeout).Should(Succeed())
		Expect(svc.Spec.ClusterIP).To(Equal(corev1.ClusterIPNone))
		Expect(svc.Spec.PublishNotReadyAddresses).To(BeTrue(), "index i must resolve before its pod is Ready")
		Expect(svc.Spec.Selector).To(Equal(map[string]string{ibjv1.ControllerUIDLabel: string(job.UID)}))
		Expect(svc.Labels).To(Equal(map[string]string{ibjv1.JobNameLabel: "tf", ibjv1.ControllerUIDLabel: string(job.UID)}))
		Expect(metav1.GetControllerOf(svc)).To(HaveValue(And(
			HaveField("Kind", "IndexedBatchJob"), HaveField("Name", "tf"), HaveField("UID", job.UID),
			HaveField("BlockOwnerDeletion", HaveValue(BeTrue())),
		)), "the garbage collector deletes the Service with the job")
		var services corev1.ServiceList
		Expect(k8sClient.List(ctx, &services, client.InNamespace(ns))).To(Succeed())
		Expect(services.Items).To(HaveLen(1), "the job without network gets no Service")

		By("selecting each of the job's pods, reachable as tf-<index>.tf, and no other job's")
		selector := labels.SelectorFromSet(svc.Spec.Selector)
		for _, p := range pods {
			ix := p.Labels[ibjv1.CompletionIndexLabel]
			Expect(p.Spec.Hostname).To(Equal("tf-" + ix))
			Expect(p.Spec.Subdomain).To(Equal("tf"))
			Expect(selector.Matches(labels.Set(p.Labels))).To(BeTrue(), "pod %s", p.Name)
		}
		for _, p := range jobPods(ctx, ns, other.Name) {
			Expect(selector.Matches(labels.Set(p.Labels))).To(BeFalse(), "pod %s of another job", p.Name)
			Expect(p.Spec.Subdomain).To(BeEmpty())
		}

		By("reporting it in condition PeerDNSReady and an event")
		expectPeerDNSReady(job.Name, metav1.ConditionTrue, ibjv1.ReasonServiceCreated)
		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, 10*time.Second).Should(ContainElement(ibjv1.ReasonServiceCreated))
		Expect(apimeta.FindStatusCondition(getJob(ctx, ns, other.Name).Status.Conditions, ibjv1.ConditionPeerDNSReady)).To(BeNil())

		By("creating it again when it is deleted while the job runs")
		Expect(k8sClient.Delete(ctx, svc)).To(Succeed())
		Eventually(func(g Gomega) {
			again := &corev1.Service{}
			g.Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "tf"}, again)).To(Succeed())
			g.Expect(again.UID).NotTo(Equal(svc.UID))
			g.Expect(metav1.IsControlledBy(again, job)).To(BeTrue())
		}, timeout, 100*time.Millisecond).Should(Succeed())
	})

	It("reports a Service name taken by a Service it did not create, and leaves that Service unchanged", func() {
		foreign := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "workers", Namespace: ns, Labels: map[string]string{"app": "web"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "web"},
				Ports:    []corev1.ServicePort{{Name: "http", Port: 80}},
			},
		}
		Expect(k8sClient.Create(ctx, foreign)).To(Succeed())
		job := harness.MakeIndexedBatchJob("trainer", ns).Completions(2).Parallelism(2).PeerDNS("workers").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, runForever)
		defer k.Stop()

		By("setting PeerDNSReady False with reason ServiceNameTaken and a warning naming the Service")
		Expect(expectPeerDNSReady(job.Name, metav1.ConditionFalse, ibjv1.ReasonServiceNameTaken)).
			To(ContainSubstring("Service workers exists and is not controlled by this job"))
		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, 10*time.Second).Should(ContainElement(ibjv1.ReasonServiceNameTaken))

		By("running the pods all the same, in the subdomain asked for")
		Eventually(func(g Gomega) {
			g.Expect(getJob(ctx, ns, job.Name).Status.Active).To(Equal(int32(2)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		for _, p := range jobPods(ctx, ns, job.Name) {
			Expect(p.Spec.Subdomain).To(Equal("workers"))
		}

		By("never changing or adopting the other Service")
		key := client.ObjectKeyFromObject(foreign)
		Consistently(func(g Gomega) {
			now := &corev1.Service{}
			g.Expect(k8sClient.Get(ctx, key, now)).To(Succeed())
			g.Expect(now.ResourceVersion).To(Equal(foreign.ResourceVersion))
			g.Expect(now.OwnerReferences).To(BeEmpty())
			g.Expect(now.Labels).To(Equal(foreign.Labels))
			g.Expect(now.Spec.Selector).To(Equal(foreign.Spec.Selector))
		}, 2*time.Second, 200*time.Millisecond).Should(Succeed())
		var services corev1.ServiceList
		Expect(k8sClient.List(ctx, &services, client.InNamespace(ns))).To(Succeed())
		Expect(services.Items).To(ConsistOf(HaveField("ObjectMeta.UID", foreign.UID)))
	})
})

// expectPeerDNSReady waits until the job's condition PeerDNSReady has the
// status and reason, and returns its message.
func expectPeerDNSReady(job string, status metav1.ConditionStatus, reason string) string {
	GinkgoHelper()
	var message string
	Eventually(func(g Gomega) {
		c := apimeta.FindStatusCondition(getJob(ctx, ns, job).Status.Conditions, ibjv1.ConditionPeerDNSReady)
		g.Expect(c).NotTo(BeNil())
		g.Expect([2]string{string(c.Status), c.Reason}).To(Equal([2]string{string(status), reason}))
		message = c.Message
	}, timeout, 100*time.Millisecond).Should(Succeed())
	return message
}
