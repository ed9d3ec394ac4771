// Package e2e runs the operator binary, as its own process, against a real
// API server with kwok's fake nodes (see kwokcluster), and drives it only as
// a user would: through the API and kubectl. The pods' fate is scripted by
// the kwok.indexedjob.dev/* annotations of hack/kwok/stages/pods.yaml.
//
// `make test-e2e` builds what the suite needs and runs it. Under a plain
// `go test ./...` the suite skips itself when those binaries are missing;
// with IBJ_E2E=1 it fails instead.
package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/testutil"
)

var (
	root      string
	cluster   *kwokcluster.Cluster
	k8sClient client.Client
	scheme    = runtime.NewScheme()
	// managerBin is the operator binary under test.
	managerBin string
	// op is the running operator; the restart test replaces it.
	op *operator
)

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	// Leave room for AfterSuite to stop every process before `go test
	// -timeout` would kill the binary without cleaning up.
	if suiteConfig.Timeout > 90*time.Minute {
		suiteConfig.Timeout = 90 * time.Minute
	}
	RunSpecs(t, "IndexedBatchJob end-to-end suite (kwok)", suiteConfig, reporterConfig)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	// The suite's own clients log through controller-runtime.
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	root, err = filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	if missing := kwokcluster.MissingBinaries(root, kwokcluster.KwokKubelets); len(missing) > 0 {
		if os.Getenv("IBJ_E2E") == "" {
			Skip(fmt.Sprintf("end-to-end suite skipped: %v not built; `make test-e2e` builds them and runs it", missing))
		}
		Fail(fmt.Sprintf("missing %v: `make test-e2e` builds them", missing))
	}
	Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	Expect(ibjv1.AddToScheme(scheme)).To(Succeed())

	dir, err := os.MkdirTemp("", "ibj-e2e-")
	Expect(err).NotTo(HaveOccurred())
	managerBin = os.Getenv("IBJ_MANAGER")
	if managerBin == "" {
		By("building the operator")
		managerBin = filepath.Join(dir, "manager")
		build := exec.CommandContext(ctx, "go", "build", "-o", managerBin, "./cmd")
		build.Dir = root
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
	}

	By("starting etcd, kube-apiserver and kwok in " + dir)
	// Two operators at once serve the webhook in the leader failover spec;
	// PodNodeSelector acts in the admission-chain spec's namespace alone.
	cluster, err = kwokcluster.Start(ctx, kwokcluster.Options{Root: root, Dir: dir, Nodes: 2, WebhookReplicas: 2, Progress: GinkgoWriter,
		AdmissionPlugins: []string{"PodNodeSelector"}})
	Expect(err).NotTo(HaveOccurred())
	version, err := harness.CheckServerVersion(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	By("running against kube-apiserver " + version)
	k8sClient, err = client.New(cluster.Config, client.Options{Scheme: scheme})
	Expect(err).NotTo(HaveOccurred())
	kc = testutil.Kubectl{Path: filepath.Join(controlplane.BinDir(root), "kubectl"), Kubeconfig: cluster.Kubeconfig, Dir: root}

	By("starting the operator")
	op = startOperator()
}, NodeTimeout(5*time.Minute))

// suiteFailed keeps the cluster's logs for a look after a failure.
var suiteFailed bool

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() {
		suiteFailed = true
	}
})

var _ = AfterSuite(func() {
	if op != nil {
		op.stop()
	}
	if cluster != nil {
		Expect(cluster.Stop()).To(Succeed())
		if suiteFailed || os.Getenv("IBJ_E2E_KEEP_LOGS") != "" {
			fmt.Printf("e2e: cluster logs kept in %s\n", cluster.Dir)
		} else {
			_ = os.RemoveAll(cluster.Dir)
		}
	}
})

// operator is the operator binary running as its own process.
type operator struct {
	proc  *controlplane.Process
	probe int
}

var operatorStarts int

// webhookSlots holds the operator process serving the webhook on each of
// the cluster's webhook ports (cluster.WebhookArgs), or nil.
var webhookSlots []*controlplane.Process

// launchOperator starts bin/manager against the cluster, as a deployment
// would run it (its admission webhook included, on a free slot of the
// cluster's webhook ports), with extra flags added, and returns at once: the
// process, the port of its health probes and its log. A 1s pod failure
// backoff (10s by default) keeps retries short.
func launchOperator(extra ...string) (*controlplane.Process, int) {
	GinkgoHelper()
	operatorStarts++
	probe, err := cluster.FreePort()
	Expect(err).NotTo(HaveOccurred())
	if webhookSlots == nil {
		webhookSlots = make([]*controlplane.Process, len(cluster.WebhookBackendPorts))
	}
	slot := slices.IndexFunc(webhookSlots, func(p *controlplane.Process) bool {
		if p == nil {
			return true
		}
		exited, _ := p.Exited()
		return exited
	})
	Expect(slot).NotTo(Equal(-1), "more operators at once than the cluster has webhook ports (kwokcluster.Options.WebhookReplicas)")
	logPath := filepath.Join(cluster.Dir, fmt.Sprintf("manager-%d.log", operatorStarts))
	args := append([]string{
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
		"--pod-failure-backoff=1s",
		"--pod-failure-backoff-max=4s",
	}, cluster.WebhookArgs(slot, filepath.Join(cluster.Dir, fmt.Sprintf("webhook-certs-%d", operatorStarts)))...)
	args = append(args, extra...)
	proc, err := controlplane.StartProcess("manager", logPath, []string{"KUBECONFIG=" + cluster.Kubeconfig}, managerBin, args...)
	Expect(err).NotTo(HaveOccurred())
	webhookSlots[slot] = proc
	return proc, probe
}

// startOperator launches the operator and waits until its readiness probe
// answers.
func startOperator(extra ...string) *operator {
	GinkgoHelper()
	proc, probe := launchOperator(extra...)
	o := &operator{proc: proc, probe: probe}
	Expect(proc.WaitHealthy(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/readyz", probe), time.Minute)).
		To(Succeed(), "the operator's readiness; see %s", proc.LogPath)
	return o
}

// stop stops the operator as a rollout would: SIGTERM, then SIGKILL.
func (o *operator) stop() {
	GinkgoHelper()
	Expect(o.proc.Stop(30 * time.Second)).To(Succeed())
}

// crash kills the operator at once (SIGKILL), as an OOM kill or a node loss would.
func (o *operator) crash() {
	GinkgoHelper()
	Expect(o.proc.Kill()).To(Succeed())
}

// logTail is the end of the operator's log, for failure reports.
func (o *operator) logTail(lines int) string {
	data, err := os.ReadFile(o.proc.LogPath)
	if err != nil {
		return err.Error()
	}
	return tail(string(data), lines)
}
