package controller_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// What the operator adds to batch/v1 Job's behaviour: elastic indexes, a
// chosen subset of indexes, and a retry backoff set on the job.
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
})

// scale sets completions and parallelism to n together, as an elastic job
// is scaled.
func scale(name string, n int32) {
	GinkgoHelper()
	Eventually(func() error {
		j := getJob(ctx, ns, name)
		j.Spec.Completions = n
		j.Spec.Parallelism = ptr.To(n)
		return k8sClient.Update(ctx, j)
	}, 10*time.Second, 100*time.Millisecond).Should(Succeed())
}
