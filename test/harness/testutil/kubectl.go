package testutil

import (
	"os/exec"
	"strings"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/gomega"
)

// Kubectl runs the pinned kubectl against one cluster, as a user would.
type Kubectl struct {
	// Path is the kubectl binary (the control plane's, beside
	// kube-apiserver).
	Path string
	// Kubeconfig is the cluster's kubeconfig.
	Kubeconfig string
	// Dir is the directory kubectl runs in (the repository's root, so that
	// `-f config/samples/...` works), or the test's own when empty.
	Dir string
}

// Run runs kubectl with args and returns its combined output.
func (k Kubectl) Run(args ...string) (string, error) {
	return k.RunWithStdin("", args...)
}

// RunWithStdin runs kubectl with args and stdin (`-f -`), if not empty,
// and returns its combined output.
func (k Kubectl) RunWithStdin(stdin string, args ...string) (string, error) {
	cmd := exec.Command(k.Path, append([]string{"--kubeconfig", k.Kubeconfig}, args...)...)
	cmd.Dir = k.Dir
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Must runs kubectl with args, fails the spec if it fails, and returns its
// output.
func (k Kubectl) Must(args ...string) string {
	ginkgo.GinkgoHelper()
	out, err := k.Run(args...)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "kubectl %s\n%s", strings.Join(args, " "), out)
	return out
}

// ReportNamespace adds what a failed spec left in namespace to the spec's
// report: `kubectl get <kinds> -o wide`, the namespace's events in the order
// they happened, and `kubectl get <kind> -o yaml` of each of yamlKinds.
func (k Kubectl) ReportNamespace(namespace, kinds string, yamlKinds ...string) {
	out, _ := k.Run("get", kinds, "-n", namespace, "-o", "wide")
	ginkgo.AddReportEntry("objects", out)
	out, _ = k.Run("get", "events", "-n", namespace, "--sort-by=.metadata.creationTimestamp")
	ginkgo.AddReportEntry("events", out)
	for _, kind := range yamlKinds {
		out, _ = k.Run("get", kind, "-n", namespace, "-o", "yaml")
		ginkgo.AddReportEntry(kind, out)
	}
}
