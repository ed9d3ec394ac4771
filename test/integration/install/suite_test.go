// Package install_test checks what users install: dist/install.yaml (from
// config/default) and the Helm chart. It renders both with the pinned
// kustomize and Helm, applies them to a real kube-apiserver (envtest, which
// authorizes with RBAC) in namespaces that enforce the "restricted" Pod
// Security Standard, and runs the operator binary as a separate process with
// nothing but the generated ServiceAccount's permissions and the installed
// Deployment's args: one replica to take the seed example to its final
// status, to serve metrics and the admission webhook (also for jobs in a
// restricted namespace) and to keep its certificate across a restart, then
// two with leader election, both serving the webhook, the leader killed
// mid-job; then two started at once with an empty certificate Secret; last,
// Kueue installed under a running replica, which starts its Kueue
// integration in the same process and queues jobs with the same
// permissions.
package install_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

const (
	// chartDir is the Helm chart, relative to the repository root.
	chartDir = "charts/indexed-batch-job"
	// installNamespace and releaseName are config/default's namespace and
	// name prefix; a Helm release of that name in that namespace renders the
	// same names.
	installNamespace = "indexed-batch-job-system"
	releaseName      = "indexed-batch-job"
	// managerSA is the ServiceAccount install.yaml creates for the manager.
	managerSA = "indexed-batch-job-controller-manager"
	// testImage is the image both renderings are given, as IMG would be.
	testImage    = "example.com/indexed-batch-job"
	testImageTag = "v0.0.0-test"
)

var (
	root string // the repository root

	testEnv         *envtest.Environment
	cfg             *rest.Config // system:masters
	k8sClient       client.Client
	clientset       kubernetes.Interface
	scheme          = runtime.NewScheme()
	adminKubeconfig string // a kubeconfig file for cfg, for kubectl and helm

	kustomizeBin, helmBin, kubectlBin, managerBin string
	workDir                                       string // scratch files of this run
)

func TestInstall(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Installation suite: install.yaml, the Helm chart, RBAC, metrics, leader election")
}

var _ = BeforeSuite(func() {
	var err error
	root, err = harness.RepoRoot()
	Expect(err).NotTo(HaveOccurred())
	workDir, err = os.MkdirTemp("", "ibj-install-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, workDir)

	By("building the pinned kustomize and Helm (make kustomize helm) and the manager")
	kustomizeBin, helmBin = pinnedTools()
	managerBin = filepath.Join(workDir, "manager")
	run(root, "go", "build", "-o", managerBin, "./cmd")
	kubectlBin = filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	Expect(kubectlBin).To(BeAnExistingFile(), "KUBEBUILDER_ASSETS must hold the pinned kubectl: run `make test`, which builds the control plane into bin/")

	By("starting a control plane with no CRD: the installers bring it")
	env, err := harness.StartEnvtest(harness.EnvtestOptions{Scheme: scheme, Log: GinkgoWriter, NoCRD: true})
	Expect(err).NotTo(HaveOccurred())
	testEnv, cfg, k8sClient, clientset = env.Env, env.Config, env.Client, env.Clientset
	admin, err := testEnv.AddUser(envtest.User{Name: "install-admin", Groups: []string{"system:masters"}}, nil)
	Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := admin.KubeConfig()
	Expect(err).NotTo(HaveOccurred())
	adminKubeconfig = filepath.Join(workDir, "admin.kubeconfig")
	Expect(os.WriteFile(adminKubeconfig, kubeconfig, 0o600)).To(Succeed())
})

var _ = AfterSuite(func() {
	killManagers()
	if testEnv != nil {
		Expect(testEnv.Stop()).To(Succeed())
	}
})

// pinnedTools builds kustomize and Helm with the Makefile's own targets, so
// the versions are pinned in one place, and returns their paths.
func pinnedTools() (kustomize, helm string) {
	makefile, err := os.ReadFile(filepath.Join(root, "Makefile"))
	Expect(err).NotTo(HaveOccurred())
	version := func(name string) string {
		m := regexp.MustCompile(`(?m)^` + name + `_VERSION \?= (\S+)$`).FindSubmatch(makefile)
		Expect(m).NotTo(BeNil(), "no %s_VERSION in the Makefile", name)
		return string(m[1])
	}
	kustomize = filepath.Join(root, "bin", "kustomize-"+version("KUSTOMIZE"), "kustomize")
	helm = filepath.Join(root, "bin", "helm-"+version("HELM"), "helm")
	cmd := exec.Command("make", "--no-print-directory", "kustomize", "helm")
	cmd.Dir = root
	// A parent make's jobserver and flags are not ours.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "MAKEFLAGS=") && !strings.HasPrefix(kv, "MFLAGS=") && !strings.HasPrefix(kv, "MAKELEVEL=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "make kustomize helm:\n%s", out)
	Expect(kustomize).To(BeAnExistingFile())
	Expect(helm).To(BeAnExistingFile())
	return kustomize, helm
}

// run runs a command in dir and returns its stdout; it fails the spec,
// showing stderr, if the command fails.
func run(dir, name string, args ...string) string {
	stdout, stderr, err := runErr(dir, name, args...)
	Expect(err).NotTo(HaveOccurred(), "%s %s\n%s", name, strings.Join(args, " "), stderr)
	return stdout
}

// runErr runs a command in dir and returns its stdout, stderr and error.
func runErr(dir, name string, args ...string) (string, string, error) {
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// kustomizeBuild builds an overlay of the given kustomize directories
// (relative to the repository root) that sets the manager image to the test
// image, as `make build-installer IMG=...` does. Kustomize takes only
// relative paths, so the overlay lives under dist/.
func kustomizeBuild(extra string, dirs ...string) string {
	Expect(os.MkdirAll(filepath.Join(root, "dist"), 0o755)).To(Succeed())
	overlay, err := os.MkdirTemp(filepath.Join(root, "dist"), ".install-test-")
	Expect(err).NotTo(HaveOccurred())
	defer os.RemoveAll(overlay)
	var k strings.Builder
	k.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, d := range dirs {
		fmt.Fprintf(&k, "- ../../%s\n", d)
	}
	// config/manager names the image indexed-batch-job:latest.
	fmt.Fprintf(&k, "images:\n- name: indexed-batch-job\n  newName: %s\n  newTag: %s\n", testImage, testImageTag)
	k.WriteString(extra)
	Expect(os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k.String()), 0o644)).To(Succeed())
	return run(root, kustomizeBin, "build", overlay)
}

// helmTemplate renders the chart as release name in namespace, with the test
// image and the given --set flags.
func helmTemplate(name, namespace string, set ...string) string {
	args := make([]string, 0, 9+2*len(set))
	args = append(args, "template", name, chartDir, "--namespace", namespace,
		"--set", "image.repository="+testImage, "--set", "image.tag="+testImageTag)
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return run(root, helmBin, args...)
}

// writeFile writes content to a file in the run's scratch directory.
func writeFile(name, content string) string {
	path := filepath.Join(workDir, name)
	Expect(os.WriteFile(path, []byte(content), 0o600)).To(Succeed())
	return path
}
