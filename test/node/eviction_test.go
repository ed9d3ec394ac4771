package node

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var _ = Describe("Real failures", Label("node", "node-failure"), func() {
	It("counts a pod the kubelet evicts for going over its ephemeral-storage limit as both controllers do", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		// Each pod writes 64 MiB into its writable layer, over its 16Mi
		// limit: the kubelet's eviction manager evicts it, and with
		// backoffLimit 0 the first eviction fails the job.
		createBoth(ns, "evicted", `    completions: 2
    parallelism: 2
    backoffLimit: 0
`+workerTemplateWith(`          resources: {limits: {ephemeral-storage: 16Mi}}
`, "--duration=60s", "--write-mib=64"))
		ibj, job := waitBoth(ctx, ns, "evicted", jobTimeout)
		report(ns, "evicted", ibj, job)
		Expect(ibj).To(Equal(outcome{Failed: 2, Conditions: failedConditions("BackoffLimitExceeded")}))
		Expect(job).To(Equal(ibj), "the built-in Job controller's status on the same nodes")
		for _, kind := range []string{ibjKind, jobKind} {
			selector := map[string]string{ibjKind: "batch.indexedjob.dev/job-name=evicted", jobKind: "batch.kubernetes.io/job-name=evicted"}[kind]
			pods, err := clientset.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
			Expect(err).NotTo(HaveOccurred())
			evicted := 0
			for _, p := range pods.Items {
				if p.Status.Reason == "Evicted" {
					evicted++
				}
			}
			Expect(evicted).To(BeNumerically(">=", 1), "%s: a pod the kubelet evicted", kind)
		}
	}, SpecTimeout(5*time.Minute))
})
