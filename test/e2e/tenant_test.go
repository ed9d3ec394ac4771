package e2e

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// One operator serves every tenant: each spec below is one thing a tenant
// (a job, a pod it creates, a caller of an endpoint) or a budget setting
// has done to take it down, run beside a canary job in another namespace.
// The canary's time from create to Complete must stay within
// canaryTolerance of its time alone under the same operator, and the
// operator process must never exit.
const (
	canaryTolerance = 1.5
	// The canary runs its indexes for canaryRun, one wave: its time alone
	// is that and the operator's few requests, so what an attack adds
	// shows as a ratio over a time that does not vary by itself.
	canaryIndexes = 3
	canaryRun     = 20 * time.Second
	// budgetCanaryRun is the canary's run beside the jobs that share a
	// small client budget (QPS 20 and below): each of its few steps (its
	// creates, its status) waits its turn among eleven jobs, about 3 s at
	// QPS 20, and a longer run keeps that the small part it is of a real
	// job's time.
	budgetCanaryRun = 30 * time.Second
	// tenantLeaseName is the operator's leader election Lease.
	tenantLeaseName = "indexedbatchjob.batch.indexedjob.dev"
)

// canaryFigures are the canary's times, alone and beside each attack, for
// the report at the end of the Describe.
var canaryFigures []string

// runCanary runs the canary job in a namespace of its own and returns its
// time from the create request to its Complete condition, polled every
// 100 ms.
func runCanary(ctx context.Context) time.Duration {
	GinkgoHelper()
	return runCanaryFor(ctx, canaryRun)
}

// runCanaryFor is runCanary with pods that run for run.
func runCanaryFor(ctx context.Context, run time.Duration) time.Duration {
	GinkgoHelper()
	ns := newNamespace(ctx)
	job := harness.MakeIndexedBatchJob("canary", ns).Completions(canaryIndexes).Parallelism(canaryIndexes).
		PodAnnotation(kwokcluster.DurationAnnotation, run.String()).Obj()
	start := time.Now()
	Expect(k8sClient.Create(ctx, job)).To(Succeed())
	Eventually(func(g Gomega) {
		j := getJob(ctx, ns, "canary")
		g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).NotTo(BeEmpty())
	}).WithTimeout(3*run + time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	took := time.Since(start)
	j := getJob(ctx, ns, "canary")
	Expect(j.Status.Succeeded).To(Equal(int32(canaryIndexes)))
	Expect(j.Status.Failed).To(BeZero())
	return took
}

// canaryBeside runs the canary while an attack goes on and checks its time
// against its time alone.
func canaryBeside(ctx context.Context, attack string, alone time.Duration) {
	GinkgoHelper()
	canaryWithin(ctx, attack, canaryRun, alone, canaryTolerance)
}

// canaryWithin is canaryBeside with a canary whose pods run for run and
// another bound on the ratio.
func canaryWithin(ctx context.Context, attack string, run, alone time.Duration, tolerance float64) {
	GinkgoHelper()
	took := runCanaryFor(ctx, run)
	ratio := took.Seconds() / alone.Seconds()
	line := fmt.Sprintf("%s: canary %.1fs beside it, %.1fs alone (%.2fx)", attack, took.Seconds(), alone.Seconds(), ratio)
	canaryFigures = append(canaryFigures, line)
	AddReportEntry("canary", line)
	Expect(ratio).To(BeNumerically("<=", tolerance), line)
}

// stillRunning fails the spec if the operator process has exited.
func stillRunning(p *controlplane.Process) {
	GinkgoHelper()
	exited, err := p.Exited()
	Expect(exited).To(BeFalse(), "the operator exited (%v); see %s", err, p.LogPath)
}

// attackNamespace is a namespace for an attack's jobs, which are deleted
// when the spec ends, so that no attack goes on beside the next spec.
func attackNamespace(ctx context.Context) string {
	GinkgoHelper()
	var ns string
	DeferCleanup(func(ctx context.Context) {
		Expect(k8sClient.DeleteAllOf(ctx, &ibjv1.IndexedBatchJob{}, client.InNamespace(ns))).To(Succeed())
		// No garbage collector runs here: the test takes the pods away
		// itself, their finalizers first, rather than leave the next spec's
		// operator thousands of them to release.
		var pods corev1.PodList
		Expect(k8sClient.List(ctx, &pods, client.InNamespace(ns))).To(Succeed())
		for i := range pods.Items {
			p := &pods.Items[i]
			if len(p.Finalizers) > 0 {
				patch := client.MergeFrom(p.DeepCopy())
				p.Finalizers = nil
				Expect(client.IgnoreNotFound(k8sClient.Patch(ctx, p, patch))).To(Succeed())
			}
		}
		Expect(k8sClient.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(ns), client.GracePeriodSeconds(0))).To(Succeed())
	})
	ns = newNamespace(ctx)
	return ns
}

// replaceOperator stops the suite's operator for the rest of the spec,
// starts one with these flags in its place, and puts the suite's back when
// the spec ends.
func replaceOperator(extra ...string) *operator {
	GinkgoHelper()
	op.stop()
	op = nil
	DeferCleanup(func() { op = startOperator() })
	o := startOperator(extra...)
	DeferCleanup(o.stop)
	return o
}

// apiserverCount sums kube-apiserver's apiserver_request_total over the
// series whose labels hold every one of these label pairs.
func apiserverCount(labels ...string) float64 {
	GinkgoHelper()
	sum, err := harness.SumSeries(strings.NewReader(kc.Must("get", "--raw", "/metrics")), "apiserver_request_total", labels...)
	Expect(err).NotTo(HaveOccurred())
	return sum
}

var _ = Describe("One operator for every tenant", Ordered, ContinueOnFailure, Label("tenant"), func() {
	// alone is the canary's time with nothing else running, under the
	// suite's operator.
	var alone time.Duration
	BeforeAll(func(ctx SpecContext) {
		alone = runCanary(ctx)
		canaryFigures = []string{fmt.Sprintf("alone: canary %.1fs", alone.Seconds())}
	})
	AfterAll(func() {
		AddReportEntry("tenant canary figures", strings.Join(canaryFigures, "\n"))
		fmt.Fprintf(GinkgoWriter, "tenant canary figures:\n  %s\n", strings.Join(canaryFigures, "\n  "))
	})

	It("runs a job whose template carries the operator's own keys as if it did not, while its webhook is off", func(ctx SpecContext) {
		ns := attackNamespace(ctx)
		By("refusing each reserved key at admission, the field named")
		for _, key := range ibjv1.ReservedPodLabels {
			err := k8sClient.Create(ctx, harness.MakeIndexedBatchJob("refused", ns).PodLabel(key, "0").Obj())
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("spec.template.metadata.labels[%s]: Forbidden: is reserved", key)))
		}
		for _, key := range ibjv1.ReservedPodAnnotations {
			err := k8sClient.Create(ctx, harness.MakeIndexedBatchJob("refused", ns).PodAnnotation(key, "true").Obj())
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("spec.template.metadata.annotations[%s]: Forbidden: is reserved", key)))
		}

		By("creating such a job while the validating webhook is removed, as an admin might")
		var vwcs admissionv1.ValidatingWebhookConfigurationList
		Expect(k8sClient.List(ctx, &vwcs)).To(Succeed())
		Expect(vwcs.Items).NotTo(BeEmpty())
		for i := range vwcs.Items {
			saved := vwcs.Items[i].DeepCopy()
			Expect(k8sClient.Delete(ctx, &vwcs.Items[i])).To(Succeed())
			DeferCleanup(func(ctx context.Context) {
				saved.ResourceVersion, saved.UID = "", ""
				Expect(client.IgnoreAlreadyExists(k8sClient.Create(ctx, saved))).To(Succeed())
			})
		}
		w := watchPods(ns, "keys")
		job := harness.MakeIndexedBatchJob("keys", ns).Completions(3).Parallelism(3).
			PodAnnotation(kwokcluster.DurationAnnotation, "10s")
		for _, key := range ibjv1.ReservedPodLabels {
			job.PodLabel(key, "7")
		}
		for _, key := range ibjv1.ReservedPodAnnotations {
			job.PodAnnotation(key, "true")
		}
		Eventually(func() error { return k8sClient.Create(ctx, job.Obj()) }).WithTimeout(30 * time.Second).Should(Succeed())
		canaryBeside(ctx, "a template with every reserved key", alone)

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, "keys")
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).NotTo(BeEmpty())
			g.Expect(j.Status.Succeeded).To(Equal(int32(3)))
			g.Expect(j.Status.CompletedIndexes).To(Equal("0-2"))
		}).WithTimeout(timeout).Should(Succeed())
		By("running each index once: no pod created and deleted over and over")
		for ix := range 3 {
			Expect(w.RunsOf(ix)).To(Equal(1), "pods of index %d", ix)
		}
		for _, p := range jobPods(ctx, ns, "keys") {
			Expect(p.Labels[ibjv1.CompletionIndexLabel]).NotTo(Equal("7"), p.Name)
			Expect(p.Annotations).NotTo(HaveKey(ibjv1.DiscardedAnnotation), p.Name)
		}
		stillRunning(op.proc)
	})

	It("ignores pods a tenant creates with a job's labels and its pods' names", func(ctx SpecContext) {
		ns := attackNamespace(ctx)
		w := watchPods(ns, "target")
		job := harness.MakeIndexedBatchJob("target", ns).Completions(3).Parallelism(3).
			PodAnnotation(kwokcluster.DurationAnnotation, "10s").Obj()
		// The forged pods exist before the job and take the names its
		// first attempts would have.
		forged := func(name string, ix int) *corev1.Pod {
			return &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
					Labels: map[string]string{ibjv1.JobNameLabel: "target", ibjv1.CompletionIndexLabel: strconv.Itoa(ix)},
					Annotations: map[string]string{ibjv1.CompletionIndexLabel: strconv.Itoa(ix),
						ibjv1.DiscardedAnnotation: "true", kwokcluster.DurationAnnotation: "1s"}},
				Spec: job.Spec.Template.Spec,
			}
		}
		for ix := range 3 {
			Expect(k8sClient.Create(ctx, forged(fmt.Sprintf("target-%d-0", ix), ix))).To(Succeed())
		}
		for n := range 30 {
			Expect(k8sClient.Create(ctx, forged(fmt.Sprintf("forged-%d", n), n%3))).To(Succeed())
		}
		Expect(k8sClient.Create(ctx, job)).To(Succeed())
		canaryBeside(ctx, "33 forged pods with a job's labels and names", alone)

		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, "target")
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).NotTo(BeEmpty())
		}).WithTimeout(timeout).Should(Succeed())
		j := getJob(ctx, ns, "target")
		Expect(j.Status.Succeeded).To(Equal(int32(3)), "only the job's own pods count")
		Expect(j.Status.Failed).To(BeZero())
		var own, others int
		for _, p := range jobPods(ctx, ns, "target") {
			if metav1.IsControlledBy(&p, j) {
				own++
			} else {
				others++
			}
		}
		Expect(own).To(Equal(3))
		Expect(others).To(Equal(33), "the operator deletes no pod it does not own")
		for ix := range 3 {
			Expect(w.RunsOf(ix)).To(BeNumerically(">=", 1))
		}
		Expect(kc.Must("get", "events", "-n", ns, "--field-selector", "reason=PodNameTaken")).
			To(ContainSubstring("target-0-0"))
		stillRunning(op.proc)
	})

	It("starts a re-created job's own pods at once while the old job's pods hold the names", func(ctx SpecContext) {
		ns := attackNamespace(ctx)
		job := harness.MakeIndexedBatchJob("reused", ns).Completions(2).Parallelism(2).
			PodAnnotation(kwokcluster.DurationAnnotation, "10m")
		first := job.Obj()
		Expect(k8sClient.Create(ctx, first)).To(Succeed())
		Eventually(func() int { return len(jobPods(ctx, ns, "reused")) }).WithTimeout(timeout).Should(Equal(2))
		// No garbage collector runs here: the old pods stay, owned by a
		// job that no longer exists, as they do for a while on a cluster.
		Expect(k8sClient.Delete(ctx, first)).To(Succeed())
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKeyFromObject(first), &ibjv1.IndexedBatchJob{})
		}).WithTimeout(timeout).ShouldNot(Succeed())

		second := job.PodAnnotation(kwokcluster.DurationAnnotation, "5s").Obj()
		Expect(k8sClient.Create(ctx, second)).To(Succeed())
		canaryBeside(ctx, "a job re-created under a name whose pods remain", alone)
		Eventually(func(g Gomega) {
			j := getJob(ctx, ns, "reused")
			g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).NotTo(BeEmpty())
			g.Expect(j.Status.Succeeded).To(Equal(int32(2)))
		}).WithTimeout(timeout).Should(Succeed())
		j := getJob(ctx, ns, "reused")
		var own int
		for _, p := range jobPods(ctx, ns, "reused") {
			if metav1.IsControlledBy(&p, j) {
				own++
				Expect(p.Status.Phase).To(Equal(corev1.PodSucceeded), p.Name)
			} else {
				Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "the old job's pod %s is left as it was", p.Name)
			}
		}
		Expect(own).To(Equal(2))
		for _, p := range jobPods(ctx, ns, "reused") {
			if metav1.IsControlledBy(&p, j) {
				Expect(p.CreationTimestamp.Sub(j.CreationTimestamp.Time)).To(BeNumerically("<", 10*time.Second),
					"pod %s started at once, under a name the old pods do not hold", p.Name)
			}
		}
		stillRunning(op.proc)
	})

	It("sends a job whose creates a full quota refuses a few creates, not thousands", func(ctx SpecContext) {
		ns := attackNamespace(ctx)
		quota := &corev1.ResourceQuota{
			ObjectMeta: metav1.ObjectMeta{Name: "pods", Namespace: ns},
			Spec:       corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")}},
		}
		Expect(k8sClient.Create(ctx, quota)).To(Succeed())
		// No quota controller runs here: the test writes its usage, full.
		quota.Status = corev1.ResourceQuotaStatus{
			Hard: quota.Spec.Hard,
			Used: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("1")},
		}
		Expect(k8sClient.Status().Update(ctx, quota)).To(Succeed())

		refused := func() float64 {
			return apiserverCount(`resource="pods"`, `verb="POST"`, `code="403"`)
		}
		before := refused()
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("quota", ns).Completions(5000).Parallelism(5000).Obj())).To(Succeed())
		canaryBeside(ctx, "a job of parallelism 5,000 behind a full quota", alone)
		Eventually(func() string {
			out, _ := kc.Run("get", "events", "-n", ns, "--field-selector", "reason=FailedCreate")
			return out
		}).WithTimeout(30 * time.Second).Should(ContainSubstring("exceeded quota"))
		sent := refused() - before
		AddReportEntry("quota", fmt.Sprintf("%.0f creates refused in the canary's run", sent))
		Expect(sent).To(BeNumerically(">=", 1))
		Expect(sent).To(BeNumerically("<=", 100), "slow start: batches of 1, 2, 4, ... that stop at the first refusal")
		Expect(getJob(ctx, ns, "quota").Status.Active).To(BeZero())
		stillRunning(op.proc)
	})

	It("does not hold a small job back behind a job of 3,000 pods to create", func(ctx SpecContext) {
		ns := attackNamespace(ctx)
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("big", ns).Completions(3000).Parallelism(3000).
			PodAnnotation(kwokcluster.DurationAnnotation, "1s").Obj())).To(Succeed())
		Eventually(func() int32 { return getJob(ctx, ns, "big").Status.Active }).WithTimeout(timeout).ShouldNot(BeZero())
		canaryBeside(ctx, "a job of 3,000 indexes created just before", alone)
		Expect(getJob(ctx, ns, "big").Status.Succeeded).To(BeNumerically("<", 3000), "the big job was still running")
		stillRunning(op.proc)
	})

	It("keeps a job of 2,147,483,647 completions, and kubectl ibj on it, within bounds", func(ctx SpecContext) {
		ns := attackNamespace(ctx)
		Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob("huge", ns).Completions(2147483647).Parallelism(50).
			PodAnnotation(kwokcluster.DurationAnnotation, "1s").Obj())).To(Succeed())
		Eventually(func() int32 { return getJob(ctx, ns, "huge").Status.Succeeded }).WithTimeout(timeout).Should(BeNumerically(">=", 50))
		canaryBeside(ctx, "a job of 2,147,483,647 completions", alone)

		By("answering kubectl ibj describe and indexes in seconds")
		for _, args := range [][]string{{"describe", "huge"}, {"indexes", "huge", "--all"}} {
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			cmd := exec.CommandContext(cctx, pluginBinary(ctx), append(args, "-n", ns, "--kubeconfig", cluster.Kubeconfig)...)
			out, err := cmd.CombinedOutput()
			cancel()
			Expect(err).NotTo(HaveOccurred(), "kubectl ibj %s:\n%s", strings.Join(args, " "), tail(string(out), 20))
			Expect(string(out)).To(ContainSubstring("2147483646"), "kubectl ibj %s names the last index", args[0])
		}
		stillRunning(op.proc)
	})

	It("answers a flood of unauthenticated metrics scrapes without delaying any job", func(ctx SpecContext) {
		port, err := cluster.FreePort()
		Expect(err).NotTo(HaveOccurred())
		// The suite's operator but for its metrics endpoint: the canary's
		// time alone is the suite's.
		o := replaceOperator("--metrics-bind-address=127.0.0.1:" + strconv.Itoa(port))

		By("scraping with a fresh bad token each time, 16 callers at once")
		reviews := func() float64 { return apiserverCount(`resource="tokenreviews"`, `verb="POST"`) }
		before := reviews()
		floodCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var answers sync.Map
		var scrapes atomic.Int64
		// The operator serves a self-signed certificate here.
		tlsConfig := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // see above
		hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
		started := time.Now()
		for range 16 {
			wg.Go(func() {
				for floodCtx.Err() == nil {
					tok := make([]byte, 16)
					_, _ = rand.Read(tok)
					req, _ := http.NewRequestWithContext(floodCtx, http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
					req.Header.Set("Authorization", "Bearer "+hex.EncodeToString(tok))
					resp, err := hc.Do(req)
					if err != nil {
						continue
					}
					_ = resp.Body.Close()
					scrapes.Add(1)
					n, _ := answers.LoadOrStore(resp.StatusCode, new(atomic.Int64))
					n.(*atomic.Int64).Add(1)
				}
			})
		}
		canaryBeside(ctx, "16 callers scraping the metrics endpoint with bad tokens", alone)
		stop()
		wg.Wait()
		elapsed := time.Since(started).Seconds()
		sent := reviews() - before
		codes := map[int]int64{}
		answers.Range(func(k, v any) bool { codes[k.(int)] = v.(*atomic.Int64).Load(); return true })
		AddReportEntry("scrapes", fmt.Sprintf("%d scrapes in %.0fs answered %v; %.0f token reviews sent", scrapes.Load(), elapsed, codes, sent))
		for code := range codes {
			Expect(code).To(BeElementOf(http.StatusUnauthorized, http.StatusTooManyRequests), "answers %v", codes)
		}
		Expect(codes[http.StatusUnauthorized]).NotTo(BeZero())
		// The reviews' own lane: 10 per second after a burst of 20.
		Expect(sent).To(BeNumerically("<=", 20+10*elapsed+5))
		stillRunning(o.proc)
	})

	keepsLease := func(ctx SpecContext, qps, burst, workers int, tolerance float64) {
		ns := attackNamespace(ctx)
		o := replaceOperator("--leader-elect", "--leader-election-namespace="+ns,
			"--kube-api-qps="+strconv.Itoa(qps), "--kube-api-burst="+strconv.Itoa(burst),
			"--max-concurrent-reconciles="+strconv.Itoa(workers))
		lease := &coordinationv1.Lease{}
		Eventually(func() error {
			return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenantLeaseName}, lease)
		}).WithTimeout(time.Minute).Should(Succeed())
		holder := *lease.Spec.HolderIdentity
		own := runCanaryFor(ctx, budgetCanaryRun)

		for i := range 10 {
			Expect(k8sClient.Create(ctx, harness.MakeIndexedBatchJob(fmt.Sprintf("load-%d", i), ns).
				Completions(1000).Parallelism(1000).PodAnnotation(kwokcluster.DurationAnnotation, "1s").Obj())).To(Succeed())
		}
		attack := fmt.Sprintf("ten 1,000-index jobs at QPS %d/burst %d, %d workers", qps, burst, workers)
		canaryWithin(ctx, attack, budgetCanaryRun, own, tolerance)

		By("renewing the lease on time for 30 s more of load, twice its duration")
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(time.Second) {
			Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: tenantLeaseName}, lease)).To(Succeed())
			Expect(*lease.Spec.HolderIdentity).To(Equal(holder))
			// The default renew deadline is 10 s.
			Expect(time.Since(lease.Spec.RenewTime.Time)).To(BeNumerically("<", 10*time.Second), "lease last renewed at %v", lease.Spec.RenewTime)
			stillRunning(o.proc)
		}
		var created int32
		for i := range 10 {
			j := getJob(ctx, ns, fmt.Sprintf("load-%d", i))
			created += j.Status.Active + j.Status.Succeeded
		}
		Expect(created).To(BeNumerically("<", 10000), "the load was still going")
		data, err := os.ReadFile(o.proc.LogPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(data)).NotTo(ContainSubstring("leader election lost"))
	}
	DescribeTable("keeps its lease while ten 1,000-index jobs start at once", append([]any{keepsLease}, leaseEntries()...)...)
})

// leaseBudgets are the client budgets the lease spec runs at.
var leaseBudgets = []struct {
	name                string
	qps, burst, workers int
	tolerance           float64
}{
	{"QPS 20 / burst 30, 5 workers (kube-controller-manager's client defaults)", 20, 30, 5, canaryTolerance},
	{"QPS 50 / burst 100, 10 workers", 50, 100, 10, canaryTolerance},
	// Five writes a second for eleven jobs: the canary gets its turns, not
	// the whole budget it has alone.
	{"QPS 5 / burst 10, 5 workers", 5, 10, 5, 2.5},
}

// leaseEntries are the lease spec's entries: every budget, or those whose
// QPS IBJ_TENANT_QPS lists (comma separated; CI runs 20 alone).
func leaseEntries() []any {
	var only []string
	if v := os.Getenv("IBJ_TENANT_QPS"); v != "" {
		only = strings.Split(v, ",")
	}
	var entries []any
	for _, b := range leaseBudgets {
		if only == nil || slices.Contains(only, strconv.Itoa(b.qps)) {
			entries = append(entries, Entry(b.name, b.qps, b.burst, b.workers, b.tolerance))
		}
	}
	return entries
}

// pluginBinary is the kubectl-ibj under test: IBJ_PLUGIN, or built once.
func pluginBinary(ctx context.Context) string {
	GinkgoHelper()
	if bin := os.Getenv("IBJ_PLUGIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(cluster.Dir, "kubectl-ibj")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/kubectl-ibj")
	build.Dir = root
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), string(out))
	return bin
}
