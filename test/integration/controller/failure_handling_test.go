package controller_test

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	dto "github.com/prometheus/client_model/go"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

var _ = Describe("Failure handling", func() {

	runForever := func(int, int) podsim.Plan { return podsim.Plan{Hold: true} }

	// deletePodOfIndex deletes the running pod of an index, as a preemption would.
	deletePodOfIndex := func(job string, index string) *corev1.Pod {
		for _, p := range jobPods(ctx, ns, job) {
			if p.Labels[ibjv1.CompletionIndexLabel] == index && p.DeletionTimestamp == nil {
				Expect(k8sClient.Delete(ctx, &p)).To(Succeed())
				return &p
			}
		}
		Fail("no running pod for index " + index)
		return nil
	}
	podsOfIndex := func(job, index string) []corev1.Pod {
		var out []corev1.Pod
		for _, p := range jobPods(ctx, ns, job) {
			if p.Labels[ibjv1.CompletionIndexLabel] == index {
				out = append(out, p)
			}
		}
		return out
	}

	It("with podReplacementPolicy Failed, replaces a deleted pod only once it is Failed (seed example)", func() {
		job := harness.MakeIndexedBatchJob("replace-failed", ns).Completions(2).Parallelism(2).PodReplacementPolicy(batchv1.Failed).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, runForever)
		defer k.Stop()
		k.HoldTerminating(true)
		Eventually(func() int32 { return getJob(ctx, ns, job.Name).Status.Active }, timeout).Should(Equal(int32(2)))

		old := deletePodOfIndex(job.Name, "0")
		Eventually(func() *int32 { return getJob(ctx, ns, job.Name).Status.Terminating }, timeout).Should(Equal(ptr.To(int32(1))))
		Consistently(func(g Gomega) {
			g.Expect(podsOfIndex(job.Name, "0")).To(HaveLen(1), "no replacement while the old pod terminates")
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Terminating).To(Equal(ptr.To(int32(1))))
			g.Expect(j.Status.Active).To(Equal(int32(1)))
		}, 3*time.Second, 100*time.Millisecond).Should(Succeed())

		By("letting the kubelet finish the terminating pod")
		k.HoldTerminating(false)
		Eventually(func(g Gomega) {
			g.Expect(podsOfIndex(job.Name, "0")).To(HaveLen(1))
			g.Expect(podsOfIndex(job.Name, "0")[0].UID).NotTo(Equal(old.UID), "the replacement")
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Terminating).To(Equal(ptr.To(int32(0))))
			g.Expect(j.Status.Active).To(Equal(int32(2)))
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.Doubles()).To(BeEmpty(), "never two unfinished pods for one index")
	})

	It("with podReplacementPolicy TerminatingOrFailed, replaces a deleted pod at once", func() {
		job := harness.MakeIndexedBatchJob("replace-terminating", ns).Completions(2).Parallelism(2).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, runForever)
		defer k.Stop()
		k.HoldTerminating(true)
		Eventually(func() int32 { return getJob(ctx, ns, job.Name).Status.Active }, timeout).Should(Equal(int32(2)))

		// A finalizer of the test's own keeps the old pod terminating after
		// the controller released it, as a slow kubelet would.
		holdPod(ctx, ns, job.Name+"-0-0")
		deletePodOfIndex(job.Name, "0")
		defer releasePod(ctx, ns, job.Name+"-0-0")
		Eventually(func(g Gomega) {
			g.Expect(podsOfIndex(job.Name, "0")).To(HaveLen(2))
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.Terminating).To(Equal(ptr.To(int32(1))))
			g.Expect(j.Status.Active).To(Equal(int32(2)))
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
	})

	It("fails the job at once on a FailJob exit code, naming the rule and the pod", func() {
		job := harness.MakeIndexedBatchJob("fail-job", ns).Completions(3).Parallelism(3).
			PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix == 1 {
				return podsim.Plan{ExitCode: 42}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonPodFailurePolicy))
			g.Expect(j.Status.Failed).To(Equal(int32(3)), "the matching pod and the two it terminated")
			g.Expect(j.Status.Active).To(BeZero())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		for _, c := range getJob(ctx, ns, job.Name).Status.Conditions {
			if c.Type == ibjv1.ConditionFailed {
				Expect(c.Message).To(ContainSubstring("fail-job-1-0"))
				Expect(c.Message).To(ContainSubstring("exit code 42"))
				Expect(c.Message).To(ContainSubstring("FailJob rule at index 0"))
			}
		}
		Expect(k.RunsOf(1)).To(Equal(1))
	})

	It("does not count a failure an Ignore rule matches (DisruptionTarget), and replaces the pod", func() {
		job := harness.MakeIndexedBatchJob("ignore", ns).Completions(2).Parallelism(2).BackoffLimit(0).
			PodFailurePolicy(harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue)).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, attempt int) podsim.Plan {
			if ix == 0 && attempt < 2 {
				return podsim.Plan{Disrupted: true}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Failed).To(BeZero(), "ignored failures are not counted, even with backoffLimit 0")
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.RunsOf(0)).To(Equal(3))
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("counts a failure a Count rule matches against backoffLimit, after an Ignore rule that does not match", func() {
		job := harness.MakeIndexedBatchJob("count", ns).Completions(1).BackoffLimit(1).
			PodFailurePolicy(
				harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 9),
				harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 5),
			).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(int, int) podsim.Plan { return podsim.Plan{ExitCode: 5} })
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonBackoffLimitExceeded))
			g.Expect(j.Status.Failed).To(Equal(int32(2)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.RunsOf(0)).To(Equal(2))
	})

	It("fails one index at once on a FailIndex rule while the others run on", func() {
		job := harness.MakeIndexedBatchJob("fail-index", ns).Completions(4).Parallelism(2).BackoffLimitPerIndex(3).
			PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 7)).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix == 1 {
				return podsim.Plan{ExitCode: 7}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1")))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0,2,3"))
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.RunsOf(1)).To(Equal(1), "a FailIndex match is never retried")
		Eventually(func() []string { return eventNotes(ctx, ns, job.Name) }, 10*time.Second).Should(ContainElement(
			"IndexFailed: Index 1 failed for good after 1 attempt: exit code 7 of container main matched rule 0 (FailIndex)"))
	})

	It("fails with MaxFailedIndexesExceeded at once and terminates the remaining pods", func() {
		job := harness.MakeIndexedBatchJob("max-failed", ns).Completions(6).Parallelism(3).BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix < 2 {
				return podsim.Plan{ExitCode: 1}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonMaxFailedIndexesExceeded))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("0,1")))
			g.Expect(j.Status.Active).To(BeZero())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		// Indexes 0 to 2 start; 3 may start when 0 fails before 1 does; 4
		// and 5 never do, since the job fails as soon as 1 fails.
		for ix := 4; ix < 6; ix++ {
			Expect(k.RunsOf(ix)).To(BeZero(), "index %d never started", ix)
		}
		Eventually(func() []corev1.Pod {
			var running []corev1.Pod
			for _, p := range jobPods(ctx, ns, job.Name) {
				if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
					running = append(running, p)
				}
			}
			return running
		}, 20*time.Second).Should(BeEmpty())
	})

	It("succeeds by successPolicy and terminates lingering pods without counting them as failed", func() {
		job := harness.MakeIndexedBatchJob("leader", ns).Completions(3).Parallelism(3).SuccessPolicy(harness.SucceededIndexes("0")).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix == 0 {
				return podsim.Plan{}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionSuccessCriteriaMet)).To(Equal(ibjv1.ReasonSuccessPolicy))
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonSuccessPolicy))
			g.Expect(j.Status.Succeeded).To(Equal(int32(1)))
			g.Expect(j.Status.Failed).To(BeZero())
			g.Expect(j.Status.CompletedIndexes).To(Equal("0"))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Eventually(func() int { return len(jobPods(ctx, ns, job.Name)) }, 20*time.Second).Should(Equal(1))

		By("exporting the outcome as Prometheus metrics")
		Expect(metricValue("indexedbatchjob_jobs_finished_total", map[string]string{"condition": "Complete", "reason": "SuccessPolicy"})).To(BeNumerically(">=", 1))
		Expect(metricValue("indexedbatchjob_pods_finished_total", map[string]string{"result": "succeeded"})).To(BeNumerically(">=", 1))
		Expect(metricValue("indexedbatchjob_pods_creation_total", map[string]string{"reason": "new", "status": "succeeded"})).To(BeNumerically(">=", 3))
	})
})

const testHoldFinalizer = "test.indexedjob.dev/hold"

func holdPod(ctx context.Context, ns, name string) {
	Eventually(func() error {
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return err
		}
		p.Finalizers = append(p.Finalizers, testHoldFinalizer)
		return k8sClient.Update(ctx, p)
	}, 10*time.Second).Should(Succeed())
}

func releasePod(ctx context.Context, ns, name string) {
	Eventually(func() error {
		p := &corev1.Pod{}
		if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return client.IgnoreNotFound(err)
		}
		var keep []string
		for _, f := range p.Finalizers {
			if f != testHoldFinalizer {
				keep = append(keep, f)
			}
		}
		p.Finalizers = keep
		return k8sClient.Update(ctx, p)
	}, 10*time.Second).Should(Succeed())
}

// metricValue sums the counter samples of a metric whose labels include want.
func metricValue(name string, want map[string]string) float64 {
	var sum float64
	for _, m := range samples(name) {
		if hasLabels(m, want) {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// samples are the samples of the metric name that the operator's registry
// (controller-runtime's) serves now, one per label set.
func samples(name string) []*dto.Metric {
	families, err := metrics.Registry.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}
