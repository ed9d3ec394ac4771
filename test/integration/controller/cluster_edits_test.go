package controller_test

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// kubelets are the pod simulators holdIndexZero started, by job.
var kubelets = map[string]*podsim.Simulator{}

// holdIndexZero creates the job with a pod simulator that holds its index
// 0's first pod running until released is set, every other pod
// succeeding, and returns that pod once it runs, and its key.
func holdIndexZero(job *ibjv1.IndexedBatchJob, released *atomic.Bool) (*corev1.Pod, types.NamespacedName) {
	GinkgoHelper()
	k := startKubelet(ns, job.Name, func(ix, attempt int) podsim.Plan {
		return podsim.Plan{Hold: ix == 0 && attempt == 0 && !released.Load()}
	})
	kubelets[job.Name] = k
	DeferCleanup(func() { k.Stop(); delete(kubelets, job.Name) })
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	pod := &corev1.Pod{}
	key := types.NamespacedName{Namespace: ns, Name: job.Name + "-0-0"}
	Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, pod)).To(Succeed())
		g.Expect(pod.Status.Phase).To(Equal(corev1.PodRunning))
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed())
	return pod, key
}

// What the cluster does to a job's pods that no workload asked for: a
// policy that refuses its creates, a user who edits its pods.
var _ = Describe("Exact whatever the cluster does", func() {

	// refuseRetries installs a ValidatingAdmissionPolicy, bound to the
	// spec's namespace, that refuses every pod whose attempt is not 0 (an
	// index's retries), as a policy engine or a quota might, and returns a
	// function that lifts it. It waits until the API server enforces it.
	refuseRetries := func() (lift func()) {
		GinkgoHelper()
		name := "refuse-retries-" + ns
		policy, binding := harness.PodCreatePolicy(name, ns, "",
			`!has(object.metadata.annotations) || !('`+ibjv1.AttemptAnnotation+`' in object.metadata.annotations) || object.metadata.annotations['`+ibjv1.AttemptAnnotation+`'] == '0'`,
			"retries are refused by policy")
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		probe := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns, Annotations: map[string]string{ibjv1.AttemptAnnotation: "1"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "x"}}},
		}
		Eventually(func() error {
			return k8sClient.Create(ctx, probe.DeepCopy(), &client.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		}, 30*time.Second, 200*time.Millisecond).Should(MatchError(ContainSubstring("retries are refused by policy")))
		return func() {
			Expect(k8sClient.Delete(ctx, binding)).To(Succeed())
			Expect(k8sClient.Delete(ctx, policy)).To(Succeed())
		}
	}

	It("counts a failure and lets its tracking finalizer go while a policy refuses the retry", func() {
		job := harness.MakeIndexedBatchJob("refused", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(2).Obj()
		lift := refuseRetries()
		defer func() {
			if lift != nil {
				lift()
			}
		}()
		k := startKubelet(ns, job.Name, func(ix, attempt int) podsim.Plan {
			if ix == 1 && attempt == 0 {
				return podsim.Plan{ExitCode: 1}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())

		// The retry of index 1 is refused, over and over; the failure is
		// counted all the same, and its pod keeps only the index-retry
		// finalizer, as its index's record.
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
			if u := j.Status.UncountedTerminatedPods; u != nil {
				g.Expect(u.Failed).To(BeEmpty())
			}
			g.Expect(j.Status.CompletedIndexes).To(Equal("0"))
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionPodCreationFailed)).NotTo(BeEmpty())
			failed := &corev1.Pod{}
			g.Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "refused-1-0"}, failed)).To(Succeed())
			g.Expect(failed.Finalizers).To(ConsistOf(ibjv1.IndexRetryFinalizer))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement("FailedCreate"))

		lift()
		lift = nil
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
		}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
		retry := &corev1.Pod{}
		Expect(k8sClient.Get(ctx, types.NamespacedName{Namespace: ns, Name: "refused-1-1"}, retry)).To(Succeed())
		Expect(retry.Annotations).To(HaveKeyWithValue(ibjv1.IndexFailureCountAnnotation, "1"))
		expectNoFinalizers(ctx, ns, job.Name)
	})

	// An edit of a running pod of index 0 (attempt 0, held running); every
	// other pod succeeds. released: the pod is let go (its finalizers and
	// the job's controller reference removed) and left running; otherwise
	// it is deleted uncounted.
	type podEdit struct {
		patch    map[string]any
		released bool
		// reasons: the job's events include one of these.
		reasons []string
	}
	// meta is a patch of one field of the pod's metadata.
	meta := func(field string, value any) map[string]any {
		return map[string]any{"metadata": map[string]any{field: value}}
	}
	released, foreign, invalid := []string{"PodReleased"}, []string{"PodReleased", "ForeignPod"}, []string{"InvalidPodIndex"}
	DescribeTable("a pod edited so that it no longer belongs to its job, or names no valid index",
		func(edit podEdit) {
			job := harness.MakeIndexedBatchJob("edited", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(1).Obj()
			var edited atomic.Bool
			pod, key := holdIndexZero(job, &edited)
			Eventually(func() string { return getJob(ctx, ns, job.Name).Status.CompletedIndexes }, 30*time.Second).Should(Equal("1"))

			patch, err := json.Marshal(edit.patch)
			Expect(err).NotTo(HaveOccurred())
			Expect(k8sClient.Patch(ctx, pod, client.RawPatch(types.StrategicMergePatchType, patch))).To(Succeed())
			edited.Store(true)

			Eventually(func(g Gomega) {
				j := getJob(ctx, ns, job.Name)
				g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
				g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
				g.Expect(j.Status.Failed).To(BeZero())
				g.Expect(j.Status.CompletedIndexes).To(Equal("0,1"))
			}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
			Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement(BeElementOf(edit.reasons)))

			// The edited pod is nobody's now, or gone; nothing of the
			// operator's holds it.
			Eventually(func(g Gomega) {
				got := &corev1.Pod{}
				err := k8sClient.Get(ctx, key, got)
				if !edit.released {
					// Its name may be taken again by the index's next pod.
					g.Expect(apierrors.IsNotFound(err) || err == nil && got.UID != pod.UID).To(BeTrue(), "the pod with an edited index is deleted")
					return
				}
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(got.Finalizers).NotTo(ContainElement(ibjv1.TrackingFinalizer))
				g.Expect(got.Finalizers).NotTo(ContainElement(ibjv1.IndexRetryFinalizer))
				g.Expect(slices.ContainsFunc(got.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == job.UID })).
					To(BeFalse(), "the job's controller reference is removed")
				g.Expect(got.DeletionTimestamp).To(BeNil(), "a released pod is left running")
			}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
			expectNoFinalizers(ctx, ns, job.Name)
		},
		Entry("its job-name label removed", podEdit{
			patch: meta("labels", map[string]any{ibjv1.JobNameLabel: nil}), released: true, reasons: released}),
		Entry("its controller-uid label removed (it leaves the operator's watch)", podEdit{
			patch: meta("labels", map[string]any{ibjv1.ControllerUIDLabel: nil}), released: true, reasons: released}),
		Entry("its controller-uid label naming another job", podEdit{
			patch: meta("labels", map[string]any{ibjv1.ControllerUIDLabel: "another-job"}), released: true, reasons: foreign}),
		Entry("its controller reference removed", podEdit{
			patch: meta("ownerReferences", nil), released: true, reasons: foreign}),
		Entry("its index label moved to another index", podEdit{
			patch: meta("labels", map[string]any{ibjv1.CompletionIndexLabel: "1"}), reasons: invalid}),
		Entry("its index annotation moved out of range", podEdit{
			patch: meta("annotations", map[string]any{ibjv1.CompletionIndexLabel: "7"}), reasons: invalid}),
	)

	It("writes a pod still terminating past terminatingTimeoutSeconds Failed and replaces it, where batch/v1 would wait", func() {
		job := harness.MakeIndexedBatchJob("stuck", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(1).
			PodReplacementPolicy(batchv1.Failed).TerminatingTimeoutSeconds(2).Obj()
		var lost atomic.Bool
		pod, key := holdIndexZero(job, &lost)
		k := kubelets[job.Name]

		// The node is lost: its kubelet never ends the pod the taint
		// eviction deletes.
		k.HoldTerminating(true)
		lost.Store(true)
		Expect(k8sClient.Delete(ctx, pod, client.GracePeriodSeconds(1))).To(Succeed())
		Consistently(func() []string {
			pods := jobPods(ctx, ns, job.Name)
			names := make([]string, 0, len(pods))
			for _, p := range pods {
				names = append(names, p.Name)
			}
			return names
		}, 2*time.Second, 200*time.Millisecond).ShouldNot(ContainElement("stuck-0-1"), "replaced before the timeout")

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
		}, 60*time.Second, 200*time.Millisecond).Should(Succeed())
		Expect(k8sClient.Get(ctx, key, pod)).To(Succeed())
		Expect(pod.Status.Phase).To(Equal(corev1.PodFailed))
		Expect(pod.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.DisruptionTarget), HaveField("Reason", ibjv1.ReasonTerminatingTimeout))))
		Expect(eventReasons(ctx, ns, job.Name)).To(ContainElement("PodTerminatingTimeout"))
		expectNoFinalizers(ctx, ns, job.Name)
	})
})
