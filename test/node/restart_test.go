package node

import (
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// generationEnv gives the worker its pod's generation, from the
// restart-attempt label, so that a flag can make an index fail only in the
// first generation.
const generationEnv = `          env:
          - name: RESTART_ATTEMPT
            valueFrom:
              fieldRef:
                fieldPath: metadata.labels['batch.indexedjob.dev/restart-attempt']
`

var _ = Describe("Restarting the pods together", Label("node", "node-restart"), func() {
	It("stops every pod of the job on a RestartJob match and starts the next generation only once each one has ended", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		// Four indexes over the two nodes, each running 8 s; index 1 exits
		// 3 after 3 s in generation 0. A stopped pod takes 2 s to exit.
		manifest := jobManifest(ibjKind, "group", ns, `    completions: 4
    parallelism: 4
    maxRestarts: 1
    podFailurePolicy:
      rules:
      - action: RestartJob
        onExitCodes: {operator: In, values: [3]}
`+workerTemplateWith(generationEnv, "--duration=8s", "--fail-indexes=1", "--exit-code=3", "--fail-after=3s",
			"--fail-when-env=RESTART_ATTEMPT=0", "--term-delay=2s"))
		out, err := kc.RunWithStdin(manifest, "create", "-f", "-")
		Expect(err).NotTo(HaveOccurred(), "creating the job:\n%s", out)

		var ibj outcome
		Eventually(func(g Gomega) {
			ibj, err = getOutcome(ctx, ibjKind, ns, "group")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ibj.finished()).To(BeTrue(), "IndexedBatchJob: %s", ibj)
		}).WithContext(ctx).WithTimeout(jobTimeout).WithPolling(time.Second).Should(Succeed())
		Expect(ibj).To(Equal(outcome{Succeeded: 4, CompletedIndexes: "0-3",
			Conditions: completedConditions()}),
			"neither the failure that restarted nor the stopped pods count")
		u, err := dyn.Resource(resources[ibjKind]).Namespace(ns).Get(ctx, "group", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		restarts, _, _ := unstructured.NestedInt64(u.Object, "status", "restarts")
		Expect(restarts).To(Equal(int64(1)))

		By("from the recorded lifetimes: every pod of generation 1 was created after every pod of generation 0 ended")
		lives := lifetimes(ibjKind, ns, "group")
		var old, next []podLife
		for _, l := range lives {
			switch l.Labels["batch.indexedjob.dev/restart-attempt"] {
			case "0":
				old = append(old, l)
			case "1":
				next = append(next, l)
			}
		}
		Expect(old).To(HaveLen(4))
		Expect(next).To(HaveLen(4))
		var failed podLife
		lastEnd, lastRunning := old[0].end(), next[0].Running
		for _, o := range old {
			Expect(o.end().seen()).To(BeTrue(), "pod %s of generation 0 never ended", o.Name)
			if o.Labels[indexLabel[ibjKind]] == "1" {
				failed = o
			}
			if o.end().Seq > lastEnd.Seq {
				lastEnd = o.end()
			}
			for _, n := range next {
				Expect(n.Created.Seq).To(BeNumerically(">", o.end().Seq), "pod %s of generation 1 created while %s of generation 0 had not ended", n.Name, o.Name)
			}
		}
		for _, n := range next {
			if n.Running.Seq > lastRunning.Seq {
				lastRunning = n.Running
			}
		}
		t0 := failed.Ended.At
		entry := fmt.Sprintf("index 1 failed at 0 s; generation 0's last pod ended at %.1f s; generation 1 all running at %.1f s",
			lastEnd.At.Sub(t0).Seconds(), lastRunning.At.Sub(t0).Seconds())
		AddReportEntry("restart together", entry)
		GinkgoWriter.Println(entry)
		for _, l := range lives {
			GinkgoWriter.Println(lifeReport(l, t0))
		}
	}, SpecTimeout(5*time.Minute))
})
