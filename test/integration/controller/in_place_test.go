package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

var _ = Describe("Retry in place", func() {
	const in = batchv1.PodFailurePolicyOnExitCodesOpIn
	exit3 := harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", in, 3)

	// plan fails index 0 in place on exit 3 restarts times, then ends it
	// with end (or holds it running, when hold); every other index
	// succeeds.
	plan := func(restarts int, end int32, hold bool) func(int, int) podsim.Plan {
		return func(ix, _ int) podsim.Plan {
			if ix != 0 {
				return podsim.Plan{}
			}
			p := podsim.Plan{ExitCode: end, Hold: hold, Run: 100 * time.Millisecond}
			for range restarts {
				p.InPlace = append(p.InPlace, 3)
			}
			return p
		}
	}
	// onlyPod is the one pod index 0 had, as the API server holds it.
	onlyPod := func(job string) corev1.Pod {
		GinkgoHelper()
		var pods []corev1.Pod
		for _, p := range jobPods(ctx, ns, job) {
			if p.Labels[ibjv1.CompletionIndexLabel] == "0" {
				pods = append(pods, p)
			}
		}
		Expect(pods).To(HaveLen(1), "index 0 kept its one pod")
		return pods[0]
	}

	// stoppedRun is the one run of index 0 the kubelet had, stopped by the
	// operator (deleted while it ran) after restarts in place: the pod goes
	// once it is stopped and released.
	stoppedRun := func(k *podsim.Simulator, restarts int32) {
		GinkgoHelper()
		var runs []podsim.Record
		for _, r := range k.Truth() {
			if r.Index == 0 {
				runs = append(runs, r)
			}
		}
		Expect(runs).To(HaveLen(1), "index 0 had one pod")
		Expect(runs[0].InPlace).To(Equal(restarts))
		Expect(runs[0].Deleted).To(BeTrue(), "the operator stopped it")
	}

	It("counts each restart in place as a failure, with no new pod, when the index then succeeds", func() {
		job := harness.MakeIndexedBatchJob("in-place-ok", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(2).
			PodFailurePolicy(exit3).RetryInPlace(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, plan(2, 0, false))
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Failed).To(Equal(int32(2)))
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.UncountedTerminatedPods).To(BeNil())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		pod := onlyPod(job.Name)
		Expect(pod.Status.Phase).To(Equal(corev1.PodSucceeded))
		Expect(pod.Status.ContainerStatuses[0].RestartCount).To(Equal(int32(2)))
		Expect(pod.Spec.Containers[0].RestartPolicyRules).To(HaveLen(1), "the operator wrote the restart rule, and the API server kept it")
		Expect(getJob(ctx, ns, job.Name).Status.Failed).To(Equal(int32(2)), "counted once")
		expectNoFinalizers(ctx, ns, job.Name)
		Expect(k.Doubles()).To(BeEmpty())
	})

	It("fails the index once its failures in place go over backoffLimitPerIndex, and stops its pod", func() {
		job := harness.MakeIndexedBatchJob("in-place-over", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(2).
			PodFailurePolicy(exit3).RetryInPlace(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, plan(3, 0, true))
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("0")))
			g.Expect(j.Status.CompletedIndexes).To(Equal("1"))
			g.Expect(j.Status.Failed).To(Equal(int32(3)), "the 3 failures in place; the stop is not another")
			g.Expect(j.Status.UncountedTerminatedPods).To(BeNil())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		stoppedRun(k, 3)
		Expect(k.Doubles()).To(BeEmpty())
	})

	It("fails the job on backoffLimit with a running pod's failures in place", func() {
		job := harness.MakeIndexedBatchJob("in-place-limit", ns).Completions(2).Parallelism(2).BackoffLimit(2).
			PodFailurePolicy(exit3).RetryInPlace(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix == 0 {
				return podsim.Plan{InPlace: []int32{3, 3, 3}, Hold: true, Run: 100 * time.Millisecond}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonBackoffLimitExceeded))
			// Index 0: 3 in place and its stop; index 1: its stop.
			g.Expect(j.Status.Failed).To(Equal(int32(5)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		stoppedRun(k, 3)
	})

	It("counts the restarts of a template's own container restart rules the same way", func() {
		job := harness.MakeIndexedBatchJob("own-rules", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(2).Obj()
		job.Spec.Template.Spec.Containers[0].RestartPolicy = ptr.To(corev1.ContainerRestartPolicyNever)
		job.Spec.Template.Spec.Containers[0].RestartPolicyRules = []corev1.ContainerRestartRule{{
			Action:    corev1.ContainerRestartRuleActionRestart,
			ExitCodes: &corev1.ContainerRestartRuleOnExitCodes{Operator: corev1.ContainerRestartRuleOnExitCodesOpIn, Values: []int32{3}},
		}}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, plan(3, 0, true))
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("0")))
			g.Expect(j.Status.Failed).To(Equal(int32(3)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		stoppedRun(k, 3)
	})
})
