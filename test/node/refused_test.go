package node

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// refuseRetriesRule refuses a pod that is an index's retry, of either
// kind: the operator's attempt annotation, or the built-in controller's
// index failure count, above 0.
const refuseRetriesRule = `!(has(object.metadata.annotations) && (` +
	`('batch.indexedjob.dev/attempt' in object.metadata.annotations && object.metadata.annotations['batch.indexedjob.dev/attempt'] != '0') || ` +
	`('batch.kubernetes.io/job-index-failure-count' in object.metadata.annotations && object.metadata.annotations['batch.kubernetes.io/job-index-failure-count'] != '0')))`

var _ = Describe("Real failures", Label("node", "node-failure"), func() {
	It("counts a failure while a policy refuses its retry, where the built-in Job controller holds it back, and ends as it does once the policy is lifted", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		policy, binding := harness.PodCreatePolicy("refuse-retries-"+ns, ns, "", refuseRetriesRule, "retries are refused by policy")
		Expect(k8sClient.Create(ctx, policy)).To(Succeed())
		Expect(k8sClient.Create(ctx, binding)).To(Succeed())
		lift := func(ctx context.Context) {
			_ = k8sClient.Delete(ctx, binding)
			_ = k8sClient.Delete(ctx, policy)
		}
		DeferCleanup(lift)
		createBoth(ns, "refused", `    completions: 2
    parallelism: 2
    backoffLimitPerIndex: 1
`+workerTemplate("--duration=2s", "--fail-indexes=1"))

		By("while the retry of index 1 is refused: the operator has counted its failure, the built-in controller holds it")
		Eventually(func(g Gomega) {
			ibj, err := getOutcome(ctx, ibjKind, ns, "refused")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ibj.Failed).To(Equal(int64(1)))
			g.Expect(ibj.CompletedIndexes).To(Equal("0"))
			job, err := getOutcome(ctx, jobKind, ns, "refused")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(job.CompletedIndexes).To(Equal("0"))
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(Succeed())
		time.Sleep(10 * time.Second)
		ibj, err := getOutcome(ctx, ibjKind, ns, "refused")
		Expect(err).NotTo(HaveOccurred())
		job, err := getOutcome(ctx, jobKind, ns, "refused")
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("refused retries", "after 10 s of refusals: IndexedBatchJob "+ibj.String()+"; Job "+job.String())
		Expect(ibj.Failed).To(Equal(int64(1)), "the operator's count waited for the refused retry")

		By("the policy lifted: both retry index 1, which fails again, and end alike")
		lift(ctx)
		ibj, job = waitBoth(ctx, ns, "refused", jobTimeout)
		report(ns, "refused", ibj, job)
		Expect(ibj).To(Equal(outcome{Succeeded: 1, Failed: 2, CompletedIndexes: "0", FailedIndexes: "1", Conditions: failedConditions("FailedIndexes")}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same nodes")
	}, SpecTimeout(5*time.Minute))
})
