package controller_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

var _ = Describe("kubectl get indexedbatchjobs", func() {
	It("prints status, reason, counts and failed indexes at a glance", func() {
		kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
		Expect(kubectl).To(BeAnExistingFile(), "make test builds kubectl into bin/ beside the control plane")

		job := harness.MakeIndexedBatchJob("columns", ns).Completions(3).Parallelism(3).BackoffLimitPerIndex(0).Obj()
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		k := startKubelet(ns, job.Name, func(ix, _ int) podsim.Plan {
			if ix == 1 {
				return podsim.Plan{ExitCode: 1}
			}
			return podsim.Plan{}
		})
		defer k.Stop()
		Eventually(func() string { return harness.ConditionReason(getJob(ctx, ns, job.Name), ibjv1.ConditionFailed) }, timeout).
			Should(Equal(ibjv1.ReasonFailedIndexes))

		user, err := testEnv.AddUser(envtest.User{Name: "viewer", Groups: []string{"system:masters"}}, nil)
		Expect(err).NotTo(HaveOccurred())
		kubeconfig, err := user.KubeConfig()
		Expect(err).NotTo(HaveOccurred())
		path := filepath.Join(GinkgoT().TempDir(), "kubeconfig")
		Expect(os.WriteFile(path, kubeconfig, 0o600)).To(Succeed())

		for _, resource := range []string{"indexedbatchjobs", "ibj"} {
			cmd := exec.Command(kubectl, "--kubeconfig", path, "get", resource, "-n", ns)
			out, err := cmd.CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), string(out))
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			Expect(lines).To(HaveLen(2), string(out))
			Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "STATUS", "REASON", "SUCCEEDED", "COMPLETIONS", "ACTIVE", "FAILED-INDEXES", "STARTED", "AGE"}))
			Expect(strings.Fields(lines[1])[:7]).To(Equal([]string{"columns", "Failed", "FailedIndexes", "2", "3", "0", "1"}))
		}
		cmd := exec.Command(kubectl, "--kubeconfig", path, "get", "ibj", "-n", ns, "-o", "wide")
		out, err := cmd.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(ContainSubstring("COMPLETED-INDEXES"))
		Expect(string(out)).To(ContainSubstring("0,2"))
	})
})
