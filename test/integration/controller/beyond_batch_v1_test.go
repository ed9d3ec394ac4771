package controller_test

import (
	"sort"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// What the operator adds to batch/v1 Job's behaviour: elastic indexes, a
// chosen subset of indexes, a retry backoff set on the job, named pod
// failure policy rules and retry delays by failure kind, memory raised
// after an OOM kill.
var _ = Describe("Beyond batch/v1", func() {

	It("scales an elastic job 4 → 8 → 2 with exact status", func() {
		job := harness.MakeIndexedBatchJob("elastic", ns).Completions(4).Parallelism(4).BackoffLimitPerIndex(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		// Indexes 0 and 1 succeed, index 5 fails; the others run until the
		// job no longer has them.
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			switch ix {
			case 0, 1:
				return podsim.Plan{}
			case 5:
				return podsim.Plan{ExitCode: 1}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.CompletedIndexes).To(Equal("0,1"))
			g.Expect(j.Status.Active).To(Equal(int32(2)))
		}, timeout, 100*time.Millisecond).Should(Succeed())

		By("scaling up to 8: the new indexes start")
		scale(job.Name, 8)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("5")))
			g.Expect(j.Status.Active).To(Equal(int32(5)), "indexes 2, 3, 4, 6 and 7 run")
			g.Expect(k.RunsOf(7)).To(Equal(1))
		}, timeout, 100*time.Millisecond).Should(Succeed())

		By("scaling down to 2: the pods of indexes 2-7 go uncounted, and the job completes")
		scale(job.Name, 2)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0,1"))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("")))
			g.Expect(j.Status.Failed).To(Equal(int32(1)), "index 5's failure happened; the removed pods are not failures")
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.Active).To(BeZero())
			g.Expect(j.Status.UncountedTerminatedPods).To(BeNil())
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.Doubles()).To(BeEmpty())
		for _, ix := range []int{0, 1, 2, 3, 4, 5, 6, 7} {
			Expect(k.RunsOf(ix)).To(Equal(1), "index %d ran once", ix)
		}
		expectNoFinalizers(ctx, ns, job.Name)
		Eventually(func() []string { return eventReasons(ctx, ns, job.Name) }, 10*time.Second).Should(ContainElement("IndexRemoved"))
	})

	It("runs only the indexes listed in spec.indexes, each under its own number", func() {
		job := harness.MakeIndexedBatchJob("rerun", ns).Completions(8).Parallelism(8).BackoffLimitPerIndex(0).Indexes("1,2,6").Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, failingIndexes(2))
		defer k.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, job.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
			g.Expect(j.Status.CompletedIndexes).To(Equal("1,6"))
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("2")))
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
			g.Expect(j.Status.Failed).To(Equal(int32(1)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		for ix := range 8 {
			want := 0
			if ix == 1 || ix == 2 || ix == 6 {
				want = 1
			}
			Expect(k.RunsOf(ix)).To(Equal(want), "index %d", ix)
		}
		for _, p := range jobPods(ctx, ns, job.Name) {
			ix := p.Labels[ibjv1.CompletionIndexLabel]
			Expect(p.Spec.Hostname).To(Equal(job.Name + "-" + ix))
			Expect(p.Spec.Containers[0].Env[0].Name).To(Equal(ibjv1.CompletionIndexEnvName))
			Expect(p.Spec.Containers[0].Env[0].Value).To(Equal(ix))
		}
		expectNoFinalizers(ctx, ns, job.Name)
	})

	It("waits retryBackoff.initialDelaySeconds before replacing a failed pod", func() {
		job := harness.MakeIndexedBatchJob("slow-retry", ns).Completions(1).BackoffLimit(1).RetryBackoff(3, 3).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(_, attempt int) podsim.Plan {
			return podsim.Plan{ExitCode: int32(1 - min(attempt, 1))}
		})
		defer k.Stop()

		expectCompleted(ctx, ns, job.Name, 1, "0", timeout)
		pods := jobPods(ctx, ns, job.Name)
		Expect(pods).To(HaveLen(2))
		failedAt := pods[0].Status.ContainerStatuses[0].State.Terminated.FinishedAt.Time
		// Timestamps have whole seconds: a 3 s delay shows as at least 2 s.
		Expect(pods[1].CreationTimestamp.Sub(failedAt)).To(BeNumerically(">=", 2*time.Second),
			"the replacement came before the job's 3 s backoff (the operator's default here is 200 ms)")
	})

	It("names the rule that failed the job (condition reason PodFailurePolicy_<name>) or an index (the IndexFailed event)", func() {
		failJob := harness.MakeIndexedBatchJob("named-fail-job", ns).Completions(2).Parallelism(2).
			PodFailurePolicy(
				harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 1),
				harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
			).Obj()
		failJob.Spec.PodFailurePolicy.Rules[1].Name = "ExitCode42"
		failIndex := harness.MakeIndexedBatchJob("named-fail-index", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(2).
			PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj()
		failIndex.Spec.PodFailurePolicy.Rules[0].Name = "bad_input"
		for _, j := range []*ibjv1.IndexedBatchJob{failJob, failIndex} {
			Expect(k8sClient.Create(ctx, j)).To(Succeed())
		}
		exit := func(code int32) func(ix, _ int) podsim.Plan {
			return func(ix, _ int) podsim.Plan {
				if ix == 1 {
					return podsim.Plan{ExitCode: code}
				}
				return podsim.Plan{}
			}
		}
		k1 := startKubelet(ns, failJob.Name, exit(42))
		defer k1.Stop()
		k2 := startKubelet(ns, failIndex.Name, exit(3))
		defer k2.Stop()

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, failJob.Name)
			for _, typ := range []string{ibjv1.ConditionFailureTarget, ibjv1.ConditionFailed} {
				c := apimeta.FindStatusCondition(j.Status.Conditions, typ)
				g.Expect(c).NotTo(BeNil(), typ)
				g.Expect(c.Reason).To(Equal("PodFailurePolicy_ExitCode42"))
				g.Expect(c.Message).To(Equal("Container main for pod " + ns + "/named-fail-job-1-0 failed with exit code 42 matching FailJob rule at index 1"))
			}
			g.Expect(j.Status.Phase).To(Equal(ibjv1.PhaseFailed))
		}, timeout, 100*time.Millisecond).Should(Succeed())

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, failIndex.Name)
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes), "a FailIndex rule's name is not the job's reason")
			g.Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1")))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Eventually(func() []string { return eventNotes(ctx, ns, failIndex.Name) }, 10*time.Second).Should(ContainElement(
			`IndexFailed: Index 1 failed for good after 1 attempt: exit code 3 of container main matched rule 0 "bad_input" (FailIndex): reason PodFailurePolicy_bad_input`))
	})

	It("retries an Ignore rule's failure at once and a Count rule's after its retryDelaySeconds, not after retryBackoff's delay", func() {
		job := harness.MakeIndexedBatchJob("delay-by-kind", ns).Completions(1).BackoffLimitPerIndex(3).RetryBackoff(60, 60).
			PodFailurePolicy(
				harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue),
				harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 5),
			).Obj()
		job.Spec.PodFailurePolicy.Rules[1].Name, job.Spec.PodFailurePolicy.Rules[1].RetryDelaySeconds = "transient", ptr.To[int32](3)
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(_, attempt int) podsim.Plan {
			switch attempt {
			case 0:
				return podsim.Plan{Disrupted: true}
			case 1:
				return podsim.Plan{ExitCode: 5}
			}
			return podsim.Plan{}
		})
		defer k.Stop()

		// Under the job's 60 s backoff alone this would take two minutes.
		expectCompleted(ctx, ns, job.Name, 1, "0", 30*time.Second)
		j := getJob(ctx, ns, job.Name)
		Expect(j.Status.Failed).To(Equal(int32(1)), "the Count rule's failure counts, the Ignore rule's does not")
		pods := jobPods(ctx, ns, job.Name)
		sort.Slice(pods, func(a, b int) bool {
			return pods[a].Annotations[ibjv1.AttemptAnnotation] < pods[b].Annotations[ibjv1.AttemptAnnotation]
		})
		Expect(pods).To(HaveLen(3))
		finished := func(p corev1.Pod) time.Time { return p.Status.ContainerStatuses[0].State.Terminated.FinishedAt.Time }
		// Timestamps have whole seconds.
		Expect(pods[1].CreationTimestamp.Sub(finished(pods[0]))).To(BeNumerically("<=", 2*time.Second),
			"the evicted pod (Ignore, no retryDelaySeconds) is replaced at once")
		Expect(pods[2].CreationTimestamp.Sub(finished(pods[1]))).To(And(BeNumerically(">=", 2*time.Second), BeNumerically("<", 30*time.Second)),
			"the exit code 5 pod is replaced after its rule's 3 s, not the job's 60 s")
		Expect(pods[2].Annotations[ibjv1.IndexFailureCountAnnotation]).To(Equal("1"))
		Expect(pods[2].Annotations[ibjv1.IndexIgnoredFailureCountAnnotation]).To(Equal("1"))
	})

	It("raises an OOM-killed index's memory per OOM kill up to maxMemory, and leaves the other index's as the template's", func() {
		job := harness.MakeIndexedBatchJob("oom", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(3).RetryBackoff(0, 0).
			RetryOnOOMKilled(150, "2Gi").
			Requests(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}).
			Limits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		// Index 0 is OOM-killed three times, then fits; index 1 fits at once.
		k := startKubelet(ns, job.Name, func(ix, attempt int) podsim.Plan {
			if ix == 0 && attempt < 3 {
				return podsim.Plan{OOMKilled: true}
			}
			return podsim.Plan{}
		})
		defer k.Stop()

		expectCompleted(ctx, ns, job.Name, 2, "0,1", 30*time.Second)
		type attemptMemory struct{ Pod, Request, Limit, OOMKills, Record string }
		pods := jobPods(ctx, ns, job.Name)
		got := make([]attemptMemory, 0, len(pods))
		sort.Slice(pods, func(a, b int) bool { return pods[a].Name < pods[b].Name })
		for _, p := range pods {
			res := p.Spec.Containers[0].Resources
			got = append(got, attemptMemory{p.Name, ptr.To(res.Requests[corev1.ResourceMemory]).String(), ptr.To(res.Limits[corev1.ResourceMemory]).String(),
				p.Annotations[ibjv1.OOMKillsAnnotation], p.Annotations[ibjv1.MemoryAnnotation]})
		}
		Expect(got).To(Equal([]attemptMemory{
			{"oom-0-0", "512Mi", "1Gi", "0", "main=1Gi"},
			{"oom-0-1", "768Mi", "1536Mi", "1", "main=1536Mi"},
			{"oom-0-2", "1152Mi", "2Gi", "2", "main=2Gi"}, // the limit's 2304Mi capped
			{"oom-0-3", "1728Mi", "2Gi", "3", "main=2Gi"},
			{"oom-1-0", "512Mi", "1Gi", "0", "main=1Gi"},
		}))
		Expect(getJob(ctx, ns, job.Name).Status.Failed).To(Equal(int32(3)), "an OOM kill counts as any failure")
		Eventually(func() []string { return eventNotes(ctx, ns, job.Name) }, 10*time.Second).Should(ContainElement(
			"MemoryRaised: Pod oom-0-1 of index 0 gets memory main=1536Mi (OOM kills of the index: 1)"))
	})
})

// scale sets completions and parallelism to n together, as an elastic job
// is scaled.
// What a RestartJob rule does: the job's pods restart together, in
// generations that never overlap.
var _ = Describe("Restarting the pods together (RestartJob)", func() {
	restarting := func(name string, maxRestarts int32) *harness.JobWrapper {
		return harness.MakeIndexedBatchJob(name, ns).Completions(4).Parallelism(4).MaxRestarts(maxRestarts).
			PodFailurePolicy(harness.OnExitCodes(ibjv1.PodFailurePolicyActionRestartJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3))
	}
	generations := func(name string) map[string]string {
		out := map[string]string{}
		for _, p := range jobPods(ctx, ns, name) {
			out[p.Name] = p.Labels[ibjv1.RestartAttemptLabel]
		}
		return out
	}

	It("stops every pod, starts the next generation only once they all ended, and completes with exact counts", func() {
		// Index 0 succeeds at once; index 2's first pod exits 3 after
		// 300 ms; the others run until stopped. The next generation succeeds.
		k := startKubelet(ns, "group", func(ix, attempt int) podsim.Plan {
			switch {
			case attempt > 0, ix == 0:
				return podsim.Plan{}
			case ix == 2:
				return podsim.Plan{Run: 300 * time.Millisecond, ExitCode: 3}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		k.HoldTerminating(true)
		Expect(k8sClient.Create(ctx, restarting("group", 2).Obj())).To(Succeed())

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, "group")
			g.Expect(j.Status.Restarts).To(Equal(int32(1)))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0"))
			g.Expect(ptr.Deref(j.Status.Terminating, 0)).To(Equal(int32(2)), "indexes 1 and 3 stopped")
		}, timeout, 50*time.Millisecond).Should(Succeed())
		By("while the stopped pods still terminate, no pod of the new generation exists")
		Consistently(func() map[string]string { return generations("group") }, 2*time.Second, 50*time.Millisecond).
			Should(Equal(map[string]string{"group-0-0": "0", "group-1-0": "0", "group-2-0": "0", "group-3-0": "0"}))

		k.HoldTerminating(false)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, "group")
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).To(Equal(ibjv1.ReasonCompletionsReached))
			g.Expect(j.Status.Restarts).To(Equal(int32(1)))
			g.Expect(j.Status.Succeeded).To(Equal(int32(4)))
			g.Expect(j.Status.Failed).To(BeZero(), "neither the failure that restarted nor the stopped pods count")
		}, timeout, 100*time.Millisecond).Should(Succeed())
		for _, ix := range []int{1, 2, 3} {
			Expect(k.RunsOf(ix)).To(Equal(2), "index %d ran in both generations", ix)
		}
		Expect(k.RunsOf(0)).To(Equal(1), "index 0 completed before the restart")
		Expect(k.Violations()).To(BeEmpty())
		for name, g := range generations("group") {
			if name != "group-0-0" && name[len(name)-1] == '1' {
				Expect(g).To(Equal("1"), "pod %s", name)
			}
		}
		expectNoFinalizers(ctx, ns, "group")
		Eventually(func() []string { return eventReasons(ctx, ns, "group") }, 10*time.Second).Should(ContainElement("Restarting"))
	})

	It("fails with MaxRestartsExceeded once a failure comes after maxRestarts restarts", func() {
		// Index 1 exits 3 in every generation; the others run until stopped.
		k := startKubelet(ns, "again", func(ix, _ int) podsim.Plan {
			if ix == 1 {
				return podsim.Plan{Run: 300 * time.Millisecond, ExitCode: 3}
			}
			return podsim.Plan{Hold: true}
		})
		defer k.Stop()
		Expect(k8sClient.Create(ctx, restarting("again", 1).Obj())).To(Succeed())
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, "again")
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonMaxRestartsExceeded))
			g.Expect(j.Status.Restarts).To(Equal(int32(1)))
			// The second generation's failure and its three stopped pods.
			g.Expect(j.Status.Failed).To(Equal(int32(4)))
		}, timeout, 100*time.Millisecond).Should(Succeed())
		Expect(k.Violations()).To(BeEmpty())
		expectNoFinalizers(ctx, ns, "again")
	})
})

func scale(name string, n int32) {
	GinkgoHelper()
	Eventually(func() error {
		j := getJob(ctx, ns, name)
		j.Spec.Completions = n
		j.Spec.Parallelism = ptr.To(n)
		return k8sClient.Update(ctx, j)
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}
