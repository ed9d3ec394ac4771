package node

import (
	"fmt"
	"regexp"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// inPlaceSpec is a job whose index 0 exits with 3 once (its worker counts
// its failures in an emptyDir, which a restart in place keeps, and takes
// those of earlier pods from the index's failure count), then succeeds;
// a Count rule on 3 retries it with retry (InPlace or NewPod). Everything
// else is the defaults, the operator's backoff of 10 s included.
func inPlaceSpec(retry string) string {
	return fmt.Sprintf(`    completions: 2
    parallelism: 2
    backoffLimitPerIndex: 1
    podFailurePolicy:
      rules:
      - action: Count
        retry: %s
        onExitCodes:
          operator: In
          values: [3]
`, retry) + workerTemplateWith(`          env:
          - name: PRIOR_FAILURES
            valueFrom:
              fieldRef:
                fieldPath: metadata.annotations['batch.indexedjob.dev/job-index-failure-count']
          volumeMounts:
          - name: state
            mountPath: /state
        volumes:
        - name: state
          emptyDir: {}
`, "--duration=2s", "--fail-indexes=0", "--exit-code=3", "--fail-times=1", "--state-dir=/state")
}

// logTime is the time the worker printed on the line of its pod's log that
// matches marker (the last run's log: the kubelet removes an earlier run's
// once the pod has finished, so a run prints when the one before it
// exited).
func logTime(ns, pod string, marker *regexp.Regexp) time.Time {
	GinkgoHelper()
	logs := kc.Must("-n", ns, "logs", pod)
	m := marker.FindStringSubmatch(logs)
	Expect(m).NotTo(BeNil(), "kubectl logs %s:\n%s", pod, logs)
	at, err := time.Parse(time.RFC3339Nano, m[1])
	Expect(err).NotTo(HaveOccurred())
	return at
}

var (
	exitedWith3  = regexp.MustCompile(`index 0: exiting with 3 at (\S+)`)
	exitedBefore = regexp.MustCompile(`index 0: the previous run exited at (\S+)`)
	startedAt    = regexp.MustCompile(`index 0: started at (\S+)`)
)

var _ = Describe("Retry in place on a real node", Label("node"), func() {
	It("restarts a failed container in place, at least 5x sooner than a new pod, with the same exact status", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		for name, retry := range map[string]string{"in-place": "InPlace", "new-pod": "NewPod"} {
			out, err := kc.RunWithStdin(jobManifest(ibjKind, name, ns, inPlaceSpec(retry)), "create", "-f", "-")
			Expect(err).NotTo(HaveOccurred(), "creating the %s job:\n%s", name, out)
		}
		want := outcome{Succeeded: 2, Failed: 1, CompletedIndexes: bothIndexes,
			Conditions: completedConditions()}
		for _, name := range []string{"in-place", "new-pod"} {
			Eventually(func(g Gomega) {
				o, err := getOutcome(ctx, ibjKind, ns, name)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(o.finished()).To(BeTrue(), "%s: %s", name, o)
			}).WithContext(ctx).WithTimeout(jobTimeout).WithPolling(time.Second).Should(Succeed())
			o, err := getOutcome(ctx, ibjKind, ns, name)
			Expect(err).NotTo(HaveOccurred())
			Expect(o).To(Equal(want), name)
		}

		By("in place: one pod for index 0, its container restarted once")
		inPlacePods := podsOf(ibjKind, ns, "in-place")
		Expect(exitCodes(inPlacePods)).To(Equal(map[int][]int32{0: {0}, 1: {0}}))
		Expect(inPlacePods[0].Restarts).To(Equal(int32(1)))
		inPlaceGap := logTime(ns, inPlacePods[0].Name, startedAt).Sub(logTime(ns, inPlacePods[0].Name, exitedBefore))

		By("new pod: a second pod for index 0")
		newPods := podsOf(ibjKind, ns, "new-pod")
		Expect(exitCodes(newPods)).To(Equal(map[int][]int32{0: {3, 0}, 1: {0}}))
		newPodGap := logTime(ns, newPods[1].Name, startedAt).Sub(logTime(ns, newPods[0].Name, exitedWith3))

		figures := fmt.Sprintf("from index 0's exit 3 to its worker running again: in place %.2fs, new pod %.2fs (%.1fx)",
			inPlaceGap.Seconds(), newPodGap.Seconds(), newPodGap.Seconds()/inPlaceGap.Seconds())
		AddReportEntry("retry in place", figures)
		fmt.Fprintln(GinkgoWriter, figures)
		Expect(inPlaceGap).To(BeNumerically(">", 0))
		Expect(newPodGap).To(BeNumerically(">=", 5*inPlaceGap), figures)
	})
})
