package controller_test

import (
	"context"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// A real MutatingAdmissionPolicy rewrites the job's pods at create, as a
// policy engine of a production cluster may. This suite runs no admission
// webhook of the operator's, so the job is admitted whatever its pods
// become; the controller must see the rewrite on each create's answer.
var _ = Describe("Pods the cluster's admission chain rewrites", func() {
	// countCreates counts the pods created in ns from now on.
	countCreates := func() *atomic.Int32 {
		GinkgoHelper()
		w, err := clientset.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(w.Stop)
		n := &atomic.Int32{}
		go func() {
			for e := range w.ResultChan() {
				if e.Type == watch.Added {
					n.Add(1)
				}
			}
		}()
		return n
	}

	It("discards each pod stripped of its job-name label, says so within 10 s, creates at most parallelism+2 a minute, and goes on once the policy is fixed", func() {
		policy, binding := harness.PodMutatePolicy("strip-job-name-"+ns, ns, "", harness.RemoveLabelPatch(ibjv1.JobNameLabel))
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		removePolicy := func() {
			Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), binding))).To(Succeed())
			Expect(client.IgnoreNotFound(k8sClient.Delete(context.Background(), policy))).To(Succeed())
		}
		DeferCleanup(removePolicy)
		Eventually(func() bool {
			probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "probe-", Namespace: ns, Labels: map[string]string{ibjv1.JobNameLabel: "probe"}},
				Spec: harness.MakeIndexedBatchJob("probe", ns).Obj().Spec.Template.Spec}
			if k8sClient.Create(ctx, probe, client.DryRunAll) != nil {
				return false
			}
			_, kept := probe.Labels[ibjv1.JobNameLabel]
			return !kept
		}, timeout, 100*time.Millisecond).Should(BeTrue(), "the policy never reached the admission chain")

		creates := countCreates()
		// A delay of 1 s would be 60 tries a minute: the operator waits at
		// least a minute over parallelism+1 while creates come back mutated.
		job := harness.MakeIndexedBatchJob("stripped", ns).Completions(2).Parallelism(2).Obj()
		job.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To[int32](1)}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		created := time.Now()

		By("saying why within 10 s: condition PodCreationFailed, reason PodMutated, naming the label")
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			c := apimeta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodCreationFailed)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
			g.Expect(c.Reason).To(Equal(ibjv1.ReasonPodMutated))
			g.Expect(c.Message).To(ContainSubstring("metadata.labels[" + ibjv1.JobNameLabel + "] was removed"))
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhasePodMutated))
		}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement(ibjv1.ReasonPodMutated))

		By("creating at most parallelism+2 pods in the next half minute, counting none, keeping none")
		time.Sleep(time.Until(created.Add(30 * time.Second)))
		Expect(creates.Load()).To(And(BeNumerically(">=", 1), BeNumerically("<=", 4)), "pods created in 30 s")
		j := getJob(ctx, ns, job.Name)
		Expect(j.Status.Active).To(BeZero())
		Expect(j.Status.Failed).To(BeZero())
		Expect(j.Status.Succeeded).To(BeZero())
		var pods corev1.PodList
		Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		Expect(pods.Items).To(BeEmpty(), "a mutated pod is deleted")
		mutatedEvents := 0
		for _, r := range eventReasons(ctx, ns, job.Name) {
			if r == ibjv1.ReasonPodMutated {
				mutatedEvents++
			}
		}
		Expect(mutatedEvents).To(Equal(1), "the event is said once while the condition stands")

		By("going on at the next try once the policy is gone, and completing exactly")
		removePolicy()
		k := startKubelet(ns, job.Name, succeedAll)
		defer k.Stop()
		expectCompleted(ctx, ns, job.Name, 2, "0,1", 45*time.Second)
		j = getJob(ctx, ns, job.Name)
		Expect(apimeta.FindStatusCondition(j.Status.Conditions, ibjv1.ConditionPodCreationFailed)).To(BeNil())
		Expect(j.Status.Failed).To(BeZero())
		expectNoFinalizers(ctx, ns, job.Name)
		Expect(k.Doubles()).To(BeEmpty())
	})
})
