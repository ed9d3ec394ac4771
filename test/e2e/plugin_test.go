package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kubectlibj"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

var _ = Describe("kubectl ibj", Ordered, func() {
	// pluginDir holds the plugin as kubectl-ibj, put first on kubectl's
	// PATH so that `kubectl ibj` finds it as it would on a user's machine.
	var pluginDir string
	BeforeAll(func(ctx SpecContext) {
		pluginDir = GinkgoT().TempDir()
		bin := os.Getenv("IBJ_PLUGIN")
		if bin == "" {
			By("building the plugin")
			bin = filepath.Join(pluginDir, "build", "kubectl-ibj")
			build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubectl-ibj")
			build.Dir = root
			out, err := build.CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
		}
		bin, err := filepath.Abs(bin)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.Symlink(bin, filepath.Join(pluginDir, "kubectl-ibj"))).To(Succeed())
	})

	// kubectlIBJ runs `kubectl ibj args…` through the pinned kubectl.
	kubectlIBJ := func(args ...string) string {
		GinkgoHelper()
		cmd := exec.Command(filepath.Join(controlplane.BinDir(root), "kubectl"),
			append(append([]string{"ibj"}, args...), "--kubeconfig", cluster.Kubeconfig)...)
		cmd.Env = append(os.Environ(), "PATH="+pluginDir+string(os.PathListSeparator)+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "kubectl ibj %s\n%s", strings.Join(args, " "), out)
		return string(out)
	}

	It("shows the seed example's failed indexes and reruns only them", func(ctx context.Context) {
		ns := newNamespace(ctx)
		kc.Must("apply", "-n", ns, "-f", "config/samples/batch_v1alpha1_indexedbatchjob.yaml")
		kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/per-index", "--timeout=120s")

		By("listing the failed indexes: 1 and 2, two attempts each, exit code 1")
		lines := strings.Split(strings.TrimSpace(kubectlIBJ("indexes", "per-index", "--failed", "-n", ns)), "\n")
		Expect(lines).To(HaveLen(3), strings.Join(lines, "\n"))
		Expect(strings.Fields(lines[0])[:6]).To(Equal([]string{"INDEX", "STATE", "ATTEMPTS", "RETRIES-LEFT", "EXIT-CODE", "CONTAINER"}))
		for i, ix := range []string{"1", "2"} {
			Expect(strings.Fields(lines[i+1])[:6]).To(Equal([]string{ix, "failed", "2", "0", "1", "example"}), lines[i+1])
		}
		var report kubectlibj.IndexReport
		Expect(json.Unmarshal([]byte(kubectlIBJ("indexes", "per-index", "-o", "json", "-n", ns)), &report)).To(Succeed())
		Expect(report.Items).To(HaveLen(8))
		Expect(report.Counts).To(Equal(map[string]int32{kubectlibj.StateSucceeded: 6, kubectlibj.StateFailed: 2}))

		By("rerunning them as per-index-rerun-1")
		w := watchPods(ns, "per-index-rerun-1")
		Expect(kubectlIBJ("rerun", "per-index", "--failed", "-n", ns)).
			To(Equal("indexedbatchjob.batch.indexedjob.dev/per-index-rerun-1 created\n"))
		// The sample's fake-kubelet annotations fail indexes 1 and 2 again.
		kc.Must("wait", "-n", ns, "--for=condition=Failed", "ibj/per-index-rerun-1", "--timeout=120s")
		j := getJob(ctx, ns, "per-index-rerun-1")
		Expect(j.Spec.Indexes).To(Equal(ptr.To("1,2")))
		Expect(j.Labels).To(HaveKeyWithValue(kubectlibj.RerunOfLabel, "per-index"))
		Expect(harness.ConditionReason(j, ibjv1.ConditionFailed)).To(Equal(ibjv1.ReasonFailedIndexes))
		Expect(j.Status.FailedIndexes).To(Equal(ptr.To("1,2")))
		for ix := range 8 {
			want := 0
			if ix == 1 || ix == 2 {
				want = 2
			}
			Expect(w.RunsOf(ix)).To(Equal(want), "pods of index %d", ix)
		}
		Expect(kubectlIBJ("describe", "per-index-rerun-1", "-n", ns)).To(SatisfyAll(
			MatchRegexp(`Rerun of:\s+per-index`),
			MatchRegexp(`State:\s+Failed \(FailedIndexes\)`),
		))
	})
})
