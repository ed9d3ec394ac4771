// Package multikueue runs IndexedBatchJobs through Kueue's MultiKueue on
// local clusters: a manager cluster and two workers (kwok clusters with
// their garbage collector), Kueue's released manager and the operator
// binary on each, wired as Kueue documents (test/harness/multikueue). Jobs
// are created on the manager and run on a worker.
//
// `make test-multikueue` builds what the suite needs and runs it. Under a
// plain `go test ./...` the suite skips itself when those binaries are
// missing; with IBJ_E2E=1 it fails instead.
package multikueue

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/multikueue"
)

var (
	root       string
	federation *multikueue.Federation
)

func TestMultiKueue(t *testing.T) {
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	if suiteConfig.Timeout > 30*time.Minute {
		suiteConfig.Timeout = 30 * time.Minute
	}
	RunSpecs(t, "IndexedBatchJob with MultiKueue suite (kwok)", suiteConfig, reporterConfig)
}

// skipOrFail skips the suite when what it needs is not built, unless
// IBJ_E2E is set (make test-multikueue sets it), when it fails.
func skipOrFail(msg string) {
	if os.Getenv("IBJ_E2E") == "" {
		Skip(msg)
	}
	Fail(msg)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	logf.SetLogger(zap.New(zap.WriteTo(GinkgoWriter)))
	var err error
	root, err = filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	missing := kwokcluster.MissingBinaries(root, kwokcluster.KwokKubelets)
	manager, kueue := os.Getenv("IBJ_MANAGER"), os.Getenv("IBJ_KUEUE_MANAGER")
	for _, bin := range []string{manager, kueue, filepath.Join(controlplane.BinDir(root), "kube-controller-manager")} {
		if _, err := os.Stat(bin); bin == "" || err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) > 0 {
		skipOrFail(fmt.Sprintf("MultiKueue suite skipped: %q missing (IBJ_MANAGER and IBJ_KUEUE_MANAGER name the operator and Kueue's manager); `make test-multikueue` builds them and runs it", missing))
	}
	if os.Geteuid() != 0 {
		skipOrFail("running Kueue's manager chrooted takes root")
	}
	dir, err := os.MkdirTemp("", "ibj-multikueue-")
	Expect(err).NotTo(HaveOccurred())
	By("starting a manager cluster and two workers, each with Kueue and the operator, in " + dir)
	federation, err = multikueue.Start(ctx, multikueue.Options{
		Root: root, Dir: dir, KueueBinary: kueue, OperatorBinary: manager,
		WorkerLostTimeout: workerLostTimeout, Progress: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(10*time.Minute))

// workerLostTimeout is the manager's multiKueue.workerLostTimeout.
const workerLostTimeout = 20 * time.Second

var suiteFailed bool

var _ = ReportAfterEach(func(report SpecReport) {
	if report.Failed() {
		suiteFailed = true
	}
})

var _ = AfterSuite(func(ctx SpecContext) {
	if federation == nil {
		return
	}
	Expect(federation.Stop(ctx)).To(Succeed())
	dir := filepath.Dir(federation.Manager.Cluster.Dir)
	if suiteFailed || os.Getenv("IBJ_E2E_KEEP_LOGS") != "" {
		fmt.Printf("multikueue: the clusters' logs are kept in %s\n", dir)
	} else {
		_ = os.RemoveAll(dir)
	}
})
