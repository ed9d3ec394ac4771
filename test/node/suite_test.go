// Package node runs IndexedBatchJobs on real containers: a cluster of real
// nodes (IBJ_NODE_NODES, default 2) whose kubelets run them on containerd
// and runc (test/harness/nodecluster),
// with the operator installed as users install it, from dist/install.yaml,
// as a pod of its own image under its ServiceAccount and restricted Pod
// Security, its webhook called through its Service. Each spec runs the same
// job as a batch/v1 Job beside it, which the built-in Job controller of the
// cluster's kube-controller-manager runs on the same nodes, and holds the
// two statuses to each other and to the exact values, with the pod phases
// and exit codes the kubelets reported. The node-failure specs
// (node_failure_test.go) lose a node and restart kubelets and containerds
// under both.
//
// `make test-node` builds what the suite needs and runs it as root. Under a
// plain `go test ./...` the suite skips itself; with IBJ_NODE=1 a missing
// prerequisite fails it instead.
package node

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

var (
	root      string
	imagesDir string
	cluster   *nodecluster.Cluster
	clientset kubernetes.Interface
	dyn       dynamic.Interface
	// k8sClient is what testutil's helpers take.
	k8sClient client.Client
)

func TestNode(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	if suiteConfig.Timeout > 35*time.Minute {
		suiteConfig.Timeout = 35 * time.Minute
	}
	RunSpecs(t, "IndexedBatchJob on a real node", suiteConfig, reporterConfig)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	root, err = filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	imagesDir = os.Getenv("IBJ_NODE_IMAGES")
	if imagesDir == "" {
		imagesDir = filepath.Join(root, "dist", "node-images")
	}
	if missing := nodecluster.Prerequisites(root, imagesDir); len(missing) > 0 || os.Getenv("IBJ_NODE") == "" {
		if os.Getenv("IBJ_NODE") == "" {
			Skip("node suite skipped: `make test-node` runs it (as root, on real containers)")
		}
		Fail("missing " + strings.Join(missing, "; "))
	}

	nodes := 2
	if v := os.Getenv("IBJ_NODE_NODES"); v != "" {
		nodes, err = strconv.Atoi(v)
		Expect(err).NotTo(HaveOccurred(), "IBJ_NODE_NODES")
	}
	dir, err := os.MkdirTemp("", "ibj-node-")
	Expect(err).NotTo(HaveOccurred())
	By("starting the node cluster in " + dir)
	cluster, err = nodecluster.Start(ctx, nodecluster.Options{Root: root, Dir: dir, ImagesDir: imagesDir, Nodes: nodes, Progress: GinkgoWriter})
	Expect(err).NotTo(HaveOccurred())
	version, err := harness.CheckServerVersion(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	By("running against kube-apiserver " + version)
	clientset, err = kubernetes.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	dyn, err = dynamic.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	k8sClient, err = client.New(cluster.Config, client.Options{})
	Expect(err).NotTo(HaveOccurred())
	kc = testutil.Kubectl{Path: filepath.Join(controlplane.BinDir(root), "kubectl"), Kubeconfig: cluster.Kubeconfig, Dir: root}

	By("installing the operator: kubectl apply -f install.yaml (image " + nodecluster.ManagerImage + ")")
	kc.Must("apply", "--server-side", "-f", filepath.Join(imagesDir, "install.yaml"))
	kc.Must("-n", operatorNamespace, "rollout", "status", "deployment/"+operatorDeployment, "--timeout=180s")
	// The webhook answers once the operator has issued its certificate
	// and the webhook configurations carry its CA: until then a create
	// is refused for an unknown authority.
	Eventually(func() error {
		out, err := kc.RunWithStdin(jobManifest(ibjKind, "webhook-ready", "default", seedSpec), "create", "--dry-run=server", "-f", "-")
		if err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}, NodeTimeout(6*time.Minute))

// failures are the failed specs, one line each, repeated at the end of the
// suite's output, where a CI excerpt of its last lines shows them.
var failures []string

// ReportAfterEach keeps, for a failed spec, its failure and report entries
// and the operator's log in the cluster's kept directory (failures.txt,
// operator-<spec>.log): a failure seen once in CI is read there afterwards.
var _ = ReportAfterEach(func(report SpecReport) {
	if !report.Failed() {
		return
	}
	msg := report.FailureMessage()
	first, _, _ := strings.Cut(msg, "\n")
	failures = append(failures, fmt.Sprintf("%s: %.400s", report.FullText(), first))
	if cluster == nil {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "=== %s\n%s\n%s\n", report.FullText(), report.FailureLocation(), msg)
	for _, e := range report.ReportEntries {
		fmt.Fprintf(&b, "--- %s\n%s\n", e.Name, e.StringRepresentation())
	}
	f, err := os.OpenFile(filepath.Join(cluster.Dir, "failures.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		_, _ = f.WriteString(b.String())
		_ = f.Close()
	}
	out, _ := kc.Run("-n", operatorNamespace, "logs", "deployment/"+operatorDeployment, "--all-containers")
	_ = os.WriteFile(filepath.Join(cluster.Dir, fmt.Sprintf("operator-%d.log", report.LeafNodeLocation.LineNumber)), []byte(out), 0o644)
})

var _ = AfterSuite(func() {
	if cluster == nil {
		return
	}
	suiteFailed := len(failures) > 0
	if suiteFailed {
		out, _ := kc.Run("-n", operatorNamespace, "logs", "deployment/"+operatorDeployment, "--tail=200")
		fmt.Fprintf(GinkgoWriter, "operator log:\n%s\n", out)
	}
	Expect(cluster.Stop()).To(Succeed())
	for _, f := range failures {
		fmt.Printf("node: failed: %s\n", f)
	}
	if suiteFailed || os.Getenv("IBJ_NODE_KEEP_LOGS") != "" {
		fmt.Printf("node: cluster logs kept in %s (failures.txt: each failure in full)\n", cluster.Dir)
	} else {
		_ = os.RemoveAll(cluster.Dir)
	}
})
