package kueue_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
)

// otherQueue is a second LocalQueue of the spec's namespace.
const otherQueue = "other"

// Kueue's rules for a job's labels and annotations, applied by the
// operator's validating webhook through the real API server, which sends
// it only the updates its matchConditions select.
var _ = Describe("Kueue's job validations in the operator's webhook", func() {
	It("refuses a change of the queue name of an admitted job, and allows it while the job waits suspended", func() {
		cq := makeQueues(2, true)
		Expect(k8sClient.Create(ctx, &kueuev1beta2.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: otherQueue, Namespace: ns},
			Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(cq)},
		})).To(Succeed())
		k := holding(0, 1)
		startKubelet("admitted", k)
		Expect(k8sClient.Create(ctx, queuedJob("admitted", 2, 2).Obj())).To(Succeed())
		Eventually(func(g Gomega) {
			g.Expect(hasCondition(workloadOf(g, "admitted"), kueuev1beta2.WorkloadAdmitted)).To(BeTrue())
			g.Expect(ptr.Deref(getJob("admitted").Spec.Suspend, true)).To(BeFalse(), "resumed by Kueue")
		}, timeout).Should(Succeed())

		By("moving the running job to LocalQueue other: refused, with the field")
		var err error
		// The controller writes the job's status meanwhile: an update
		// from a stale read conflicts before the webhook sees it.
		Eventually(func() bool {
			job := getJob("admitted")
			job.Labels[queueNameLabel] = otherQueue
			err = k8sClient.Update(ctx, job)
			return apierrors.IsConflict(err)
		}, timeout).Should(BeFalse())
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(Equal(`admission webhook "vindexedbatchjob-v1alpha1.kb.io" denied the request: ` +
			`IndexedBatchJob.batch.indexedjob.dev "admitted" is invalid: ` +
			`metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable`))
		Expect(getJob("admitted").Labels).To(HaveKeyWithValue(queueNameLabel, "queue"))

		By("a job waiting suspended in a LocalQueue with no ClusterQueue may move to another LocalQueue")
		Expect(k8sClient.Create(ctx, queuedJob("waiting", 1, 1).Label(queueNameLabel, "nowhere").Obj())).To(Succeed())
		Eventually(func(g Gomega) {
			waiting := getJob("waiting")
			g.Expect(ptr.Deref(waiting.Spec.Suspend, false)).To(BeTrue())
			waiting.Labels[queueNameLabel] = otherQueue
			g.Expect(k8sClient.Update(ctx, waiting)).To(Succeed())
		}, timeout).Should(Succeed())

		By("a new job naming a prebuilt workload whose name is no object name: refused (a valid one is what MultiKueue's copies carry)")
		err = k8sClient.Create(ctx, queuedJob("prebuilt", 1, 1).Label("kueue.x-k8s.io/prebuilt-workload-name", "Not_A_Name").Obj())
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "%v", err)
		Expect(err.Error()).To(ContainSubstring(`metadata.labels[kueue.x-k8s.io/prebuilt-workload-name]: Invalid value: "Not_A_Name"`))

		By("the admitted job runs on and completes")
		k.open(0, 1)
		Eventually(completed("admitted"), timeout).Should(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, getJob("waiting")))).To(Succeed())
	})
})
