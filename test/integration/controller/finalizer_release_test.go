package controller_test

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// The bound on a counted pod's finalizer (--counted-finalizer-hold) where
// the client's QPS is the limit: a big job's creates keep the token bucket
// empty, so a small job's succeeded pods, whose removals are background
// work, get no spare token until those creates are done; only the bound
// lets them go sooner, at every other token.
var _ = Describe("Counted pods' finalizers at the client's QPS", func() {
	It("lets go of a finished job's pods within --counted-finalizer-hold and their share of the QPS while another job's creates use it all", func() {
		const (
			qps   = 20
			small = 20
			big   = 300
			hold  = 2 * time.Second
			// The stated bound: the hold, then the small job's removals
			// at half the QPS (2 s), a turn of the client's queue (1 s)
			// and the patches: about 5 s. A removal that waited for the
			// big job's creates (15 s at the whole QPS) would wait 12 s
			// or more.
			bound = 10.0
		)
		op.stop()
		op = startOperatorWith(operatorOptions{qps: qps, burst: qps, finalizerHold: hold})
		beforeCount, beforeWithin := releaseWaits(bound)

		smallJob := harness.MakeIndexedBatchJob("small", ns).Completions(small).Parallelism(small).Obj()
		Expect(k8sClient.Create(ctx, smallJob)).To(Succeed())
		k := startKubelet(ns, smallJob.Name, succeedAll)
		defer k.Stop()
		// No kubelet for the big job: its pods stay pending, and its
		// sync only creates them.
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("big", ns).Completions(big).Parallelism(big).Obj())).To(Succeed())

		Eventually(func() bool {
			return apimeta.IsStatusConditionTrue(getJob(ctx, ns, smallJob.Name).Status.Conditions, ibjv1.ConditionComplete)
		}, 30*time.Second, 100*time.Millisecond).Should(BeTrue())
		expectNoFinalizers(ctx, ns, smallJob.Name)
		Expect(len(jobPods(ctx, ns, "big"))).To(BeNumerically("<", big),
			"the big job's creates were still using the client's QPS when the small job's pods were let go")

		count, within := releaseWaits(bound)
		Expect(count-beforeCount).To(BeEquivalentTo(small), "every pod of the small job went through the background queue")
		Expect(within-beforeWithin).To(BeEquivalentTo(small),
			"every counted pod lost its finalizer within %v s of the status write that counted it (%s)", bound, waitBuckets())
	})
})

// releaseWait is indexedbatchjob_counted_finalizer_release_wait_seconds.
const releaseWait = "indexedbatchjob_counted_finalizer_release_wait_seconds"

// releaseWaits reads releaseWait: how many removals it observed, and how
// many of them within le seconds (a bucket's bound).
func releaseWaits(le float64) (count, within uint64) {
	for _, m := range samples(releaseWait) {
		h := m.GetHistogram()
		count += h.GetSampleCount()
		found := false
		for _, b := range h.GetBucket() {
			if b.GetUpperBound() == le {
				within += b.GetCumulativeCount()
				found = true
			}
		}
		Expect(found).To(BeTrue(), "the histogram has a bucket of %v s", le)
	}
	return count, within
}

// waitBuckets lists releaseWait's cumulative bucket counts, for a
// failure's message.
func waitBuckets() string {
	out := ""
	for _, m := range samples(releaseWait) {
		for _, b := range m.GetHistogram().GetBucket() {
			out += fmt.Sprintf("le %v: %d; ", b.GetUpperBound(), b.GetCumulativeCount())
		}
	}
	return out
}
