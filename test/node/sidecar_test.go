package node

import (
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
)

// sidecarName is the container the spec's admission policy injects into
// every pod of its namespace, as a service mesh injects its proxy: a
// native sidecar (an init container with restartPolicy Always) that runs
// until the kubelet stops it, and exits 143 on SIGTERM. The worker image
// plays it, as index 0 (its --fail-indexes=0 makes it crash).
const sidecarName = "mesh-proxy"

// injectSidecar installs, for the pods of ns, a MutatingAdmissionPolicy
// that adds the sidecar with args, and waits until a dry-run pod shows it.
func injectSidecar(ctx context.Context, ns string, args ...string) {
	GinkgoHelper()
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = fmt.Sprintf("%q", a)
	}
	policy, binding := harness.PodMutatePolicy("inject-"+ns, ns, "", harness.AddInitContainerPatch(fmt.Sprintf(
		`Object.spec.initContainers{name: %q, image: %q, args: [%s], restartPolicy: "Always", `+
			`env: [Object.spec.initContainers.env{name: "JOB_COMPLETION_INDEX", value: "0"}]}`,
		sidecarName, nodecluster.WorkerImage, strings.Join(quoted, ", "))))
	Expect(k8sClient.Create(ctx, policy)).To(Succeed())
	Expect(k8sClient.Create(ctx, binding)).To(Succeed())
	DeferCleanup(func(ctx context.Context) {
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, binding))).To(Succeed())
		Expect(client.IgnoreNotFound(k8sClient.Delete(ctx, policy))).To(Succeed())
	})
	Eventually(func() bool {
		probe := &corev1.Pod{}
		probe.GenerateName, probe.Namespace = "probe-", ns
		probe.Spec.Containers = []corev1.Container{{Name: "main", Image: nodecluster.WorkerImage}}
		if k8sClient.Create(ctx, probe, client.DryRunAll) != nil {
			return false
		}
		return len(probe.Spec.InitContainers) == 1 && probe.Spec.InitContainers[0].Name == sidecarName
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(time.Second).Should(BeTrue(), "the sidecar policy never reached the admission chain")
}

// sidecarExits are the exit codes the kubelet reported for the injected
// sidecar of each of the job's pods, by index, whether every pod had it,
// and how many times the kubelet restarted it in all.
func sidecarExits(kind, ns, name string) (exits map[int][]int32, everyPod bool, restarts int32) {
	GinkgoHelper()
	var pods corev1.PodList
	Expect(k8sClient.List(context.Background(), &pods, client.InNamespace(ns), client.MatchingLabels{jobNameLabel[kind]: name})).To(Succeed())
	exits, everyPod = map[int][]int32{}, len(pods.Items) > 0
	for _, pod := range pods.Items {
		r := reportOf(kind, &pod)
		found := false
		for _, cs := range pod.Status.InitContainerStatuses {
			if cs.Name == sidecarName {
				found, restarts = true, restarts+cs.RestartCount
				if t := cs.State.Terminated; t != nil {
					exits[r.Index] = append(exits[r.Index], t.ExitCode)
				}
			}
		}
		everyPod = everyPod && found
	}
	return exits, everyPod, restarts
}

var _ = Describe("A sidecar injected at admission, on real nodes", Label("node", "sidecar"), func() {
	It("completes each index when its main container exits, as the built-in Job does", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		injectSidecar(ctx, ns, "--duration=1h")
		createBoth(ns, "mesh", "    completions: 2\n    parallelism: 2\n"+workerTemplate("--duration=2s"))
		ibj, job := waitBoth(ctx, ns, "mesh", jobTimeout)
		report(ns, "mesh", ibj, job)
		want := outcome{Succeeded: 2, CompletedIndexes: bothIndexes, Conditions: completedConditions()}
		Expect(ibj).To(Equal(want))
		Expect(job).To(Equal(want))
		for _, kind := range []string{ibjKind, jobKind} {
			_, every, _ := sidecarExits(kind, ns, "mesh")
			Expect(every).To(BeTrue(), "%s: a pod without the injected sidecar", kind)
		}
	})

	It("matches exit-code rules on the template's containers only, never on the sidecar the kubelet stops", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		injectSidecar(ctx, ns, "--duration=1h")
		// Index 0's main container exits 1; the kubelet then stops the
		// sidecar, which exits 143. A FailJob rule on 143 is the user's
		// rule for their own container's SIGTERM: it must not fire on the
		// mesh's.
		createBoth(ns, "rules", `    completions: 2
    parallelism: 2
    backoffLimitPerIndex: 1
    podFailurePolicy:
      rules:
      - action: FailJob
        onExitCodes:
          operator: In
          values: [143]
`+workerTemplate("--duration=2s", "--fail-indexes=0", "--exit-code=1"))
		ibj, job := waitBoth(ctx, ns, "rules", jobTimeout)
		report(ns, "rules", ibj, job)

		By("the operator: index 0 fails twice by backoffLimitPerIndex, the rule never matches")
		Expect(ibj).To(Equal(outcome{Succeeded: 1, Failed: 2, CompletedIndexes: "1", FailedIndexes: "0",
			Conditions: failedConditions("FailedIndexes")}))
		exits, every, _ := sidecarExits(ibjKind, ns, "rules")
		Expect(every).To(BeTrue())
		Expect(exits[0]).NotTo(BeEmpty(), "the kubelet reported no end of index 0's sidecar")

		By("the built-in Job reads every container of the pod: where the sidecar exited 143, its FailJob rule fires")
		jobExits, _, _ := sidecarExits(jobKind, ns, "rules")
		figures := fmt.Sprintf("sidecar exit codes of index 0: operator %v, built-in %v; built-in outcome: %s", exits[0], jobExits[0], job)
		AddReportEntry("sidecar exit codes", figures)
		fmt.Fprintln(GinkgoWriter, figures)
		if len(jobExits[0]) > 0 && jobExits[0][0] == 143 {
			Expect(job.Conditions).To(ContainElement("Failed/PodFailurePolicy"), figures)
		}
	})

	It("leaves a crashing sidecar to the kubelet, with the built-in Job's count", func(ctx SpecContext) {
		ns := recordedNamespace(ctx)
		// The sidecar exits 1 after a second, every time; the kubelet
		// restarts it while the main container runs 6 s.
		injectSidecar(ctx, ns, "--duration=1s", "--fail-indexes=0", "--exit-code=1")
		createBoth(ns, "crashing", "    completions: 2\n    parallelism: 2\n    backoffLimitPerIndex: 1\n"+workerTemplate("--duration=6s"))
		ibj, job := waitBoth(ctx, ns, "crashing", jobTimeout)
		report(ns, "crashing", ibj, job)
		Expect(ibj).To(Equal(job), "the same count as the built-in Job")
		Expect(ibj).To(Equal(outcome{Succeeded: 2, CompletedIndexes: bothIndexes, Conditions: completedConditions()}))
		for _, kind := range []string{ibjKind, jobKind} {
			_, every, restarts := sidecarExits(kind, ns, "crashing")
			Expect(every).To(BeTrue())
			Expect(restarts).To(BeNumerically(">=", 2), "%s: the sidecar did not crash and restart while the main containers ran", kind)
		}
	})
})
