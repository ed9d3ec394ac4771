package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

const (
	// timeout bounds a job's run: seconds of simulated work plus backoffs.
	timeout = 90 * time.Second
	poll    = 200 * time.Millisecond
)

// kubectl runs the pinned kubectl against the cluster, as a user would, and
// returns its combined output.
func kubectl(args ...string) (string, error) {
	bin := filepath.Join(controlplane.BinDir(root), "kubectl")
	cmd := exec.Command(bin, append([]string{"--kubeconfig", cluster.Kubeconfig}, args...)...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mustKubectl runs kubectl and fails the spec if it fails.
func mustKubectl(args ...string) string {
	GinkgoHelper()
	out, err := kubectl(args...)
	Expect(err).NotTo(HaveOccurred(), "kubectl %s\n%s", strings.Join(args, " "), out)
	return out
}

// newNamespace creates a namespace for one spec and, if the spec fails,
// reports what was in it and the end of the operator's log.
func newNamespace(ctx context.Context) string {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	Expect(k8sClient.Create(ctx, ns)).To(Succeed())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			out, _ := kubectl("get", "ibj,pods", "-n", ns.Name, "-o", "wide")
			AddReportEntry("objects", out)
			out, _ = kubectl("get", "ibj", "-n", ns.Name, "-o", "yaml")
			AddReportEntry("jobs", out)
			out, _ = kubectl("get", "events", "-n", ns.Name, "--sort-by=.metadata.creationTimestamp")
			AddReportEntry("events", out)
			out, _ = kubectl("get", "pods", "-n", ns.Name, "-o", "yaml")
			AddReportEntry("pods", out)
			if op != nil {
				AddReportEntry("operator log", op.logTail(60))
			}
		}
	})
	return ns.Name
}

// getJob reads the job fresh from the API server.
func getJob(ctx context.Context, ns, name string) *ibjv1.IndexedBatchJob {
	GinkgoHelper()
	job := &ibjv1.IndexedBatchJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)).To(Succeed())
	return job
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// jobPods lists the pods of a job, by name.
func jobPods(ctx context.Context, ns, job string) []corev1.Pod {
	GinkgoHelper()
	var list corev1.PodList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job})).To(Succeed())
	sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].Name < list.Items[b].Name })
	return list.Items
}

// podsOfIndex lists the pods of one index of a job.
func podsOfIndex(ctx context.Context, ns, job string, index int) []corev1.Pod {
	GinkgoHelper()
	var out []corev1.Pod
	for _, p := range jobPods(ctx, ns, job) {
		if p.Labels[ibjv1.CompletionIndexLabel] == strconv.Itoa(index) {
			out = append(out, p)
		}
	}
	return out
}

func finished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

func hasTrackingFinalizer(p *corev1.Pod) bool {
	for _, f := range p.Finalizers {
		if f == ibjv1.TrackingFinalizer {
			return true
		}
	}
	return false
}

// watchPods records the pods of a job, as `kubectl get pods -w` would,
// until the spec ends: every pod seen per index, and whether two unfinished
// pods of one index ever existed at once.
func watchPods(ns, job string) *harness.PodWatch {
	w := harness.WatchPods(k8sClient, ns, job, 100*time.Millisecond)
	DeferCleanup(w.Stop)
	return w
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
