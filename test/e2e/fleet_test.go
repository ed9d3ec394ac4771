package e2e

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// The fleet runs' sizes; the environment can change them (IBJ_FLEET_JOBS,
// IBJ_FLEET_KILLS, IBJ_SOAK_JOBS, IBJ_OUTAGE_INDEXES, IBJ_OUTAGE_SECONDS).
// The seed is the chaos runs' (IBJ_CHAOS_SEED).
type fleetConfig struct {
	jobs, kills   int
	soakJobs      int
	outageIndexes int
	outage        time.Duration
	seed          uint64
}

func loadFleetConfig() fleetConfig {
	GinkgoHelper()
	c := fleetConfig{jobs: 1000, kills: 20, soakJobs: 10000, outageIndexes: 2000, seed: loadChaosConfig().seed}
	outageSeconds := 60
	for env, dst := range map[string]*int{
		"IBJ_FLEET_JOBS": &c.jobs, "IBJ_FLEET_KILLS": &c.kills, "IBJ_SOAK_JOBS": &c.soakJobs,
		"IBJ_OUTAGE_INDEXES": &c.outageIndexes, "IBJ_OUTAGE_SECONDS": &outageSeconds,
	} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			Expect(err).NotTo(HaveOccurred(), env)
			*dst = n
		}
	}
	c.outage = time.Duration(outageSeconds) * time.Second
	return c
}

// fleetFlags let an operator keep up with a fleet: the rate of a real
// cluster's busy operator rather than the e2e default.
var fleetFlags = []string{"--kube-api-qps=300", "--kube-api-burst=600", "--max-concurrent-reconciles=10"}

// readyz is the operator's readiness: the status code and the body.
func readyz(o *operator) (int, string) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz?verbose", o.probe))
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

var _ = Describe("Fleet", Ordered, ContinueOnFailure, Label("fleet"), func() {
	BeforeAll(func() {
		// The fleet specs run operators of their own.
		op.stop()
		op = nil
		DeferCleanup(func() { op = startOperator() })
	})

	It("refuses creates and template changes while the webhook is unreachable, and leaves admitted jobs alone", func(ctx SpecContext) {
		o := startOperator()
		DeferCleanup(o.stop)
		ns := newNamespace(ctx)
		running := harness.MakeIndexedBatchJob("running", ns).Completions(6).Parallelism(2).
			PodAnnotation("kwok.indexedjob.dev/duration", "2s").Obj()
		parked := harness.MakeIndexedBatchJob("parked", ns).Completions(2).Suspend(true).Obj()
		doomed := harness.MakeIndexedBatchJob("doomed", ns).Completions(2).Suspend(true).Obj()
		for _, j := range []*ibjv1.IndexedBatchJob{running, parked, doomed} {
			Expect(k8sClient.Create(ctx, j)).To(Succeed())
		}
		Eventually(func() int32 { return getJob(ctx, ns, "running").Status.Active }).WithTimeout(timeout).Should(BeNumerically(">", 0))

		By("cutting the webhook off from kube-apiserver, the operator still running")
		cluster.SetWebhookReachable(false)
		DeferCleanup(cluster.SetWebhookReachable, true)

		By("refusing a create and a template change, saying the webhook failed")
		out, err := applyManifest(admissionJob(ns, "new", nil), "apply")
		Expect(err).To(HaveOccurred(), "a create was admitted unjudged:\n%s", out)
		Expect(out).To(ContainSubstring("failed calling webhook"))
		Expect(out).To(ContainSubstring("indexedbatchjob-v1alpha1.kb.io"), "the refusal names the webhook")
		out, err = kc.Run("patch", "ibj/parked", "-n", ns, "--type=merge", "-p",
			`{"spec":{"template":{"metadata":{"labels":{"team":"a"}}}}}`)
		Expect(err).To(HaveOccurred(), "a template change was admitted unjudged:\n%s", out)
		Expect(out).To(ContainSubstring("failed calling webhook"))

		By("admitting every other change: labels, parallelism, resume, delete")
		kc.Must("label", "ibj/running", "-n", ns, "team=a")
		kc.Must("patch", "ibj/running", "-n", ns, "--type=merge", "-p", `{"spec":{"parallelism":3}}`)
		kc.Must("patch", "ibj/parked", "-n", ns, "--type=merge", "-p", `{"spec":{"suspend":false}}`)
		kc.Must("delete", "ibj/doomed", "-n", ns, "--wait=true")

		By("running the admitted jobs to their exact end while the webhook stays unreachable")
		for name, completions := range map[string]int32{"running": 6, "parked": 2} {
			Eventually(func(g Gomega) {
				j := getJob(ctx, ns, name)
				g.Expect(harness.ConditionReason(j, ibjv1.ConditionComplete)).NotTo(BeEmpty())
				g.Expect(j.Status.Succeeded).To(Equal(completions))
				g.Expect(j.Status.Failed).To(BeZero())
				g.Expect(j.Status.CompletedIndexes).To(Equal(podsim.Intervals(slices.Repeat([]bool{true}, int(completions)))))
			}).WithTimeout(timeout).WithPolling(poll).Should(Succeed(), "job %s", name)
		}
		Expect(getJob(ctx, ns, "running").Labels).To(HaveKeyWithValue("team", "a"))

		By("admitting creates again once the webhook is back")
		cluster.SetWebhookReachable(true)
		Eventually(func() error {
			_, err := applyManifest(admissionJob(ns, "new", nil), "apply")
			return err
		}).WithTimeout(30 * time.Second).Should(Succeed())
		expectRefused(ns, invalidTemplates[0])
	}, SpecTimeout(5*time.Minute))

	It("keeps a 2,000-index job exact through a 60 s kube-apiserver outage and an etcd restart, with no operator restart", func(ctx SpecContext) {
		cfg := loadFleetConfig()
		chaos := loadChaosConfig()
		chaos.indexes = cfg.outageIndexes
		o := startOperator()
		DeferCleanup(o.stop)
		ns := newNamespace(ctx)
		run := startChaosRun(ctx, ns, "outage", chaos)
		Eventually(run.sim.Seen).WithTimeout(2 * time.Minute).Should(BeNumerically(">=", 2*chaos.parallelism))

		By(fmt.Sprintf("stopping kube-apiserver for %s", cfg.outage))
		Expect(cluster.StopAPIServer()).To(Succeed())
		stopped := time.Now()
		// Readiness fails once the outage lasts beyond the check's grace.
		Eventually(func() int { code, _ := readyz(o); return code }).WithTimeout(cfg.outage).WithPolling(time.Second).
			Should(Equal(http.StatusInternalServerError), "readiness still passes during the outage")
		_, body := readyz(o)
		Expect(body).To(ContainSubstring("[-]kube-apiserver failed"))
		time.Sleep(time.Until(stopped.Add(cfg.outage)))
		Expect(run.terminal(ctx)).To(BeFalse())
		Expect(cluster.StartAPIServer(ctx)).To(Succeed())
		By("kube-apiserver back after " + time.Since(stopped).Round(time.Second).String() + "; restarting etcd on its data")
		time.Sleep(5 * time.Second)
		Expect(run.terminal(ctx)).To(BeFalse(), "the job ended before the etcd restart: make it longer (IBJ_OUTAGE_INDEXES)")
		Expect(cluster.RestartEtcd(ctx)).To(Succeed())

		figures := run.verify(ctx)
		exited, err := o.proc.Exited()
		Expect(exited).To(BeFalse(), "the operator exited (%v): it must ride out the outage; see %s", err, o.proc.LogPath)
		Eventually(func() int { code, _ := readyz(o); return code }).WithTimeout(time.Minute).Should(Equal(http.StatusOK))
		logs, err := os.ReadFile(o.proc.LogPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(logs)).To(ContainSubstring("kube-apiserver does not answer"))
		Expect(string(logs)).To(ContainSubstring("kube-apiserver answers again"))
		noPanics([]string{o.proc.LogPath})
		AddReportEntry("api outage", fmt.Sprintf("kube-apiserver stopped %s, then etcd restarted; one operator process throughout; %s", cfg.outage, figures))
	}, SpecTimeout(20*time.Minute))

	It("keeps 1,000 jobs exact while the operator is SIGKILLed at random 20 times and kube-apiserver restarts", func(ctx SpecContext) {
		cfg := loadFleetConfig()
		ns := newNamespace(ctx)
		first := startOperator(fleetFlags...)
		f := startFleet(ctx, ns, cfg)

		kills := rand.New(rand.NewPCG(cfg.seed, 4))
		logs := []string{first.proc.LogPath}
		proc := first.proc
		killed, restarted := 0, false
		for killed < cfg.kills {
			Expect(f.remaining(ctx)).To(BeNumerically(">", 0),
				"every job ended after %d of %d kills: make the fleet larger (IBJ_FLEET_JOBS)", killed, cfg.kills)
			time.Sleep(200*time.Millisecond + time.Duration(kills.Int64N(int64(2800*time.Millisecond))))
			if killed == cfg.kills/2 && !restarted {
				By("restarting kube-apiserver under the running operator")
				Expect(cluster.RestartAPIServer(ctx)).To(Succeed())
				restarted = true
			}
			exited, err := proc.Exited()
			Expect(exited).To(BeFalse(), "the operator exited by itself (%v); see %s", err, proc.LogPath)
			Expect(proc.Kill()).To(Succeed())
			killed++
			proc, _ = launchOperator(fleetFlags...)
			logs = append(logs, proc.LogPath)
		}
		DeferCleanup(func() { _ = proc.Stop(30 * time.Second) })
		By(fmt.Sprintf("%d kills done with %d jobs still running; the last operator runs the fleet to its end", killed, f.remaining(ctx)))
		figures := f.verify(ctx)
		noPanics(logs)
		AddReportEntry("fleet chaos", fmt.Sprintf("operator SIGKILLed %d times, kube-apiserver restarted once; %s", killed, figures))
	}, SpecTimeout(30*time.Minute))

	It("holds its memory, goroutines, connections, metric series and per-job state flat while 10,000 jobs come and go", func(ctx SpecContext) {
		soak(ctx, loadFleetConfig())
	}, SpecTimeout(60*time.Minute))
})

// The kinds of job in a fleet, by the remainder of the job's number by 5.
const (
	fleetPlain          = "plain"     // every pod succeeds unless deleted
	fleetPerIndex       = "perindex"  // backoffLimitPerIndex 1, a quarter of the pods fail
	fleetFailJob        = "failjob"   // index 7 exits 42, which a FailJob rule matches
	fleetSuccessPolicy  = "success"   // succeeds once indexes 0-4 did
	fleetTTL            = "ttl"       // ttlSecondsAfterFinished 0: gone with its pods at the end
	fleetIndexes        = 10          // completions of every fleet job
	fleetFailJobIndex   = 7           // the index whose pods exit fleetFailJobExit
	fleetFailJobExit    = 42          // the exit code the FailJob rule matches
	fleetBackoffLimit   = 100         // the job-wide limit of the kinds without per-index limits
	fleetFleetLabel     = "fleet-run" // pod label the fleet's simulator selects
	fleetPerIndexLimit  = 1           // backoffLimitPerIndex of the per-index kind
	fleetFailureRate    = 0.25        // chance a per-index kind's pod fails
	fleetJobParallelism = 2
	// fleetDeletionsPerJob bounds the running pods the deleter deletes in
	// one job.
	fleetDeletionsPerJob = 3
)

var fleetKinds = []string{fleetPlain, fleetPerIndex, fleetFailJob, fleetSuccessPolicy, fleetTTL}

// fleet is a set of jobs of every kind run by one pod simulator, with a
// deleter removing running pods at random.
type fleet struct {
	ns      string
	names   []string
	sim     *podsim.Simulator
	deleter *deleter
	stop    context.CancelFunc
}

func fleetKind(name string) string { return name[:strings.IndexByte(name, '-')] }

func fleetJob(ns, name string) *ibjv1.IndexedBatchJob {
	w := harness.MakeIndexedBatchJob(name, ns).Completions(fleetIndexes).Parallelism(fleetJobParallelism).
		PodReplacementPolicy(batchv1.Failed).PodLabel(fleetFleetLabel, ns)
	switch fleetKind(name) {
	case fleetPerIndex:
		w.BackoffLimitPerIndex(fleetPerIndexLimit)
	case fleetFailJob:
		w.BackoffLimit(fleetBackoffLimit).PodFailurePolicy(batchv1.PodFailurePolicyRule{
			Action:      batchv1.PodFailurePolicyActionFailJob,
			OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{fleetFailJobExit}},
		})
	case fleetSuccessPolicy:
		w.BackoffLimit(fleetBackoffLimit).SuccessPolicy(batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To("0-4")})
	case fleetTTL:
		w.BackoffLimit(fleetBackoffLimit).TTLSecondsAfterFinished(0)
	default:
		w.BackoffLimit(fleetBackoffLimit)
	}
	job := w.Obj()
	job.Spec.Template.Spec.NodeName = simNode
	return job
}

// startFleet starts the simulator and the deleter and creates the jobs,
// 16 at a time; it returns once every job is created.
func startFleet(ctx context.Context, ns string, cfg fleetConfig) *fleet {
	GinkgoHelper()
	fmt.Fprintf(GinkgoWriter, "fleet: %d jobs of %d indexes, seed %d\n", cfg.jobs, fleetIndexes, cfg.seed)
	AddReportEntry("fleet seed", cfg.seed)
	cs, err := kubernetes.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	runCtx, cancel := context.WithCancel(context.Background())
	f := &fleet{ns: ns, stop: cancel}
	DeferCleanup(f.Stop)
	outcomes := rand.New(rand.NewPCG(cfg.seed, 5))
	f.sim = podsim.New(podsim.Options{
		Client:        cs,
		Namespace:     ns,
		LabelSelector: fleetFleetLabel + "=" + ns,
		IndexLabels:   []string{ibjv1.CompletionIndexLabel},
		JobLabel:      ibjv1.JobNameLabel,
		Script: func(pod *corev1.Pod, index int) podsim.Plan {
			plan := podsim.Plan{Run: time.Second + time.Duration(outcomes.Int64N(int64(3*time.Second)))}
			switch fleetKind(pod.Labels[ibjv1.JobNameLabel]) {
			case fleetPerIndex:
				if outcomes.Float64() < fleetFailureRate {
					plan.ExitCode = podsim.ExitFailed
				}
			case fleetFailJob:
				if index == fleetFailJobIndex {
					plan.ExitCode = fleetFailJobExit
				}
			}
			return plan
		},
		Shutdown: 300 * time.Millisecond,
		Workers:  32,
	})
	Expect(f.sim.Run(runCtx)).To(Succeed())

	for i := range cfg.jobs {
		f.names = append(f.names, fmt.Sprintf("%s-%d", fleetKinds[i%len(fleetKinds)], i))
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1) - 1; i < int64(len(f.names)); i = next.Add(1) - 1 {
				if err := createRetrying(ctx, fleetJob(ns, f.names[i])); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		Expect(err).NotTo(HaveOccurred())
	}

	// At most fleetDeletionsPerJob pods of one job are deleted, so that
	// the last jobs running are not deleted into their backoffLimit. The
	// deleter asks one goroutine at a time.
	deletions := map[string]int{}
	f.deleter = startDeleter(runCtx, cs, ns, f.sim, rand.New(rand.NewPCG(cfg.seed, 6)), deleterOptions{
		interval:   50 * time.Millisecond,
		spare:      func(p *corev1.Pod) bool { return deletions[p.Labels[ibjv1.JobNameLabel]] >= fleetDeletionsPerJob },
		deletedPod: func(p *corev1.Pod) { deletions[p.Labels[ibjv1.JobNameLabel]]++ },
	})
	return f
}

// createRetrying creates a job, trying again while the API server or the
// webhook does not answer (a kill or a restart in progress).
func createRetrying(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
	var err error
	for range 60 {
		err = k8sClient.Create(ctx, job.DeepCopy())
		if err == nil || apierrors.IsAlreadyExists(err) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return err
}

// Stop ends the deleter and the simulator.
func (f *fleet) Stop() {
	f.stop()
	f.deleter.wait()
}

// remaining counts the jobs without a terminal condition (a TTL job that is
// gone has ended).
func (f *fleet) remaining(ctx context.Context) int {
	var list ibjv1.IndexedBatchJobList
	if err := k8sClient.List(ctx, &list, client.InNamespace(f.ns)); err != nil {
		return -1
	}
	n := 0
	for i := range list.Items {
		j := &list.Items[i]
		if harness.ConditionReason(j, ibjv1.ConditionComplete) == "" && harness.ConditionReason(j, ibjv1.ConditionFailed) == "" {
			n++
		}
	}
	return n
}

// fleetStatus is what a fleet job's status says, in the terms of the
// ground truth.
type fleetStatus struct {
	condition, reason               string
	succeeded, failed               int32
	completedIndexes, failedIndexes string
}

func statusOf(job *ibjv1.IndexedBatchJob) fleetStatus {
	got := fleetStatus{
		succeeded: job.Status.Succeeded, failed: job.Status.Failed,
		completedIndexes: job.Status.CompletedIndexes, failedIndexes: ptr.Deref(job.Status.FailedIndexes, ""),
	}
	if r := harness.ConditionReason(job, ibjv1.ConditionFailed); r != "" {
		got.condition, got.reason = ibjv1.ConditionFailed, r
	} else if r := harness.ConditionReason(job, ibjv1.ConditionComplete); r != "" {
		got.condition = ibjv1.ConditionComplete
		if r == ibjv1.ReasonSuccessPolicy {
			got.reason = r
		}
	}
	return got
}

// checkFleetJob holds one fleet job's status against the pods the simulator
// ran for it and returns what does not agree.
//
// Most kinds end exactly as their pods say. Two end on a decision (a
// FailJob rule matched, the success policy met) and then stop the pods
// still running, counting each as upstream does: after a FailJob, a pod
// the controller found unfinished counts as failed whatever it ends as;
// after success, it is not counted at all. Which pods were unfinished
// depends on when the controller saw the deciding pod, so for these kinds
// a pod that finished before the deciding pod must be counted by its
// phase, and one that finished after may be counted either way.
func checkFleetJob(name string, truth []podsim.Record, got fleetStatus) []string {
	kind := fleetKind(name)
	if kind == fleetPerIndex {
		return checkPerIndexFleetJob(truth, got)
	}
	decided, failed, problem := fleetDecision(kind, truth)
	if problem != "" {
		return []string{problem}
	}
	b := fleetBoundsOf(truth, decided)
	completed, err := indexset.Parse(got.completedIndexes, fleetIndexes)
	if err != nil {
		return []string{fmt.Sprintf("completedIndexes %q: %v", got.completedIndexes, err)}
	}
	problems, mustSucceed := b.checkCompleted(got, completed)
	want := fleetStatus{condition: ibjv1.ConditionComplete, completedIndexes: got.completedIndexes, succeeded: got.succeeded, failed: got.failed}
	switch {
	case kind == fleetFailJob:
		want.condition, want.reason = ibjv1.ConditionFailed, ibjv1.ReasonPodFailurePolicy
		// Every pod counts: succeeded or failed.
		if counted := got.succeeded - mustSucceed + got.failed - b.failedMin; counted != b.open {
			problems = append(problems, fmt.Sprintf("%d of the %d pods that ended after the FailJob pod are counted, want all", counted, b.open))
		}
	case failed > fleetBackoffLimit:
		want.condition, want.reason = ibjv1.ConditionFailed, ibjv1.ReasonBackoffLimitExceeded
		want.failed, want.completedIndexes = failed, podsim.Intervals(b.may)
	case kind == fleetSuccessPolicy:
		want.reason = ibjv1.ReasonSuccessPolicy
		if got.failed < b.failedMin || got.failed > b.failedMax {
			problems = append(problems, fmt.Sprintf("failed %d, want between %d and %d", got.failed, b.failedMin, b.failedMax))
		}
	default:
		want.failed, want.completedIndexes, want.succeeded = failed, podsim.Intervals(b.may), int32(completed.Len())
		if got.completedIndexes != fmt.Sprintf("0-%d", fleetIndexes-1) {
			problems = append(problems, fmt.Sprintf("completed with indexes %q", got.completedIndexes))
		}
	}
	if got != want {
		problems = append(problems, fmt.Sprintf("status %+v, the pods say %+v", got, want))
	}
	return problems
}

// checkPerIndexFleetJob holds a job of the per-index kind, which ends
// exactly as its pods say, against them.
func checkPerIndexFleetJob(truth []podsim.Record, got fleetStatus) []string {
	o := podsim.Expect(truth, fleetIndexes, fleetPerIndexLimit)
	want := fleetStatus{condition: o.Condition, succeeded: o.Succeeded, failed: o.Failed,
		completedIndexes: o.CompletedIndexes, failedIndexes: o.FailedIndexes}
	if o.Condition == ibjv1.ConditionFailed {
		want.reason = ibjv1.ReasonFailedIndexes
	}
	var problems []string
	if len(o.Unfinished) > 0 {
		problems = append(problems, fmt.Sprintf("ended with indexes neither done nor out of retries: %v", o.Unfinished))
	}
	if got != want {
		problems = append(problems, fmt.Sprintf("status %+v, the pods say %+v", got, want))
	}
	return problems
}

// fleetDecision is when the deciding pod of a job of kind finished (zero
// for the kinds that end on their pods alone) and how many of its pods
// failed, or a problem if the job ended without its deciding pod.
func fleetDecision(kind string, truth []podsim.Record) (time.Time, int32, string) {
	var decided time.Time
	firstSuccess := make([]time.Time, fleetIndexes)
	var failed int32
	for _, r := range truth {
		switch {
		case r.Phase == corev1.PodSucceeded:
			if firstSuccess[r.Index].IsZero() || r.Finished.Before(firstSuccess[r.Index]) {
				firstSuccess[r.Index] = r.Finished
			}
		case kind == fleetFailJob && r.ExitCode == fleetFailJobExit && !r.Deleted:
			if decided.IsZero() || r.Finished.Before(decided) {
				decided = r.Finished
			}
		}
		if r.Phase == corev1.PodFailed {
			failed++
		}
	}
	if kind == fleetSuccessPolicy {
		for i := range 5 {
			if firstSuccess[i].IsZero() {
				return decided, failed, fmt.Sprintf("index %d of the success policy never succeeded, yet the job ended", i)
			}
			if firstSuccess[i].After(decided) {
				decided = firstSuccess[i]
			}
		}
	}
	if kind == fleetFailJob && decided.IsZero() {
		return decided, failed, fmt.Sprintf("no pod of index %d exited %d, yet the job ended", fleetFailJobIndex, fleetFailJobExit)
	}
	return decided, failed, ""
}

// fleetBounds are the succeeded indexes a job's status must and may show,
// the failed pods it must and may count, and how many pods ended after its
// end was decided.
type fleetBounds struct {
	must, may                  []bool
	failedMin, failedMax, open int32
}

// fleetBoundsOf reads the bounds from the pods: a pod that finished by
// decided (or any pod, if decided is zero) counts by its phase; one that
// finished after may count either way.
func fleetBoundsOf(truth []podsim.Record, decided time.Time) fleetBounds {
	settled := func(r podsim.Record) bool { return decided.IsZero() || !r.Finished.After(decided) }
	b := fleetBounds{must: make([]bool, fleetIndexes), may: make([]bool, fleetIndexes)}
	for _, r := range truth {
		switch {
		case r.Phase == corev1.PodSucceeded && settled(r):
			b.must[r.Index], b.may[r.Index] = true, true
		case r.Phase == corev1.PodSucceeded:
			b.may[r.Index] = true
			b.open++
		case settled(r):
			b.failedMin++
			b.failedMax++
		default:
			b.failedMax++
			b.open++
		}
	}
	return b
}

// checkCompleted holds the status's completedIndexes (completed, parsed)
// and succeeded against the bounds, and returns what does not agree and
// how many indexes had to be shown.
func (b fleetBounds) checkCompleted(got fleetStatus, completed indexset.Set) ([]string, int32) {
	var problems []string
	var mustSucceed int32
	for i := range fleetIndexes {
		shown := completed.Has(int32(i))
		if b.must[i] && !shown {
			problems = append(problems, fmt.Sprintf("index %d succeeded before the job's end was decided, but completedIndexes is %q", i, got.completedIndexes))
		}
		if shown && !b.may[i] {
			problems = append(problems, fmt.Sprintf("completedIndexes %q has index %d, which never succeeded", got.completedIndexes, i))
		}
		if b.must[i] {
			mustSucceed++
		}
	}
	if got.succeeded != int32(completed.Len()) {
		problems = append(problems, fmt.Sprintf("succeeded %d, but completedIndexes %q", got.succeeded, got.completedIndexes))
	}
	return problems, mustSucceed
}

// verify waits for every job to end and every finalizer to go, then holds
// each job's status against the ground truth; TTL jobs must be gone with
// their pods. It returns the figures of the run.
func (f *fleet) verify(ctx context.Context) string {
	GinkgoHelper()
	start := time.Now()
	By("waiting for every job to end")
	Eventually(func() int { return f.remaining(ctx) }).WithContext(ctx).WithTimeout(15*time.Minute).WithPolling(2*time.Second).
		Should(BeZero(), "jobs still running")
	By("waiting until no pod keeps the tracking finalizer and every TTL job is gone")
	Eventually(func(g Gomega) {
		var pods corev1.PodList
		g.Expect(k8sClient.List(ctx, &pods, client.InNamespace(f.ns))).To(Succeed())
		var held []string
		for i := range pods.Items {
			if hasTrackingFinalizer(&pods.Items[i]) {
				held = append(held, pods.Items[i].Name)
			}
		}
		g.Expect(held).To(BeEmpty(), "pods still holding %s", ibjv1.TrackingFinalizer)
		var jobs ibjv1.IndexedBatchJobList
		g.Expect(k8sClient.List(ctx, &jobs, client.InNamespace(f.ns))).To(Succeed())
		for _, j := range jobs.Items {
			g.Expect(fleetKind(j.Name)).NotTo(Equal(fleetTTL), "TTL job %s not deleted", j.Name)
		}
	}).WithTimeout(3 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
	f.Stop()

	By("holding every job's status against the simulator's ground truth")
	byJob := map[string][]podsim.Record{}
	truth := f.sim.Truth()
	for _, r := range truth {
		byJob[r.Job] = append(byJob[r.Job], r)
	}
	var jobs ibjv1.IndexedBatchJobList
	Expect(k8sClient.List(ctx, &jobs, client.InNamespace(f.ns))).To(Succeed())
	found := map[string]*ibjv1.IndexedBatchJob{}
	for i := range jobs.Items {
		found[jobs.Items[i].Name] = &jobs.Items[i]
	}
	var pods corev1.PodList
	Expect(k8sClient.List(ctx, &pods, client.InNamespace(f.ns))).To(Succeed())
	podsLeft := map[string]int{}
	for _, p := range pods.Items {
		podsLeft[p.Labels[ibjv1.JobNameLabel]]++
	}
	var mismatches []string
	ended := map[string]int{}
	for _, name := range f.names {
		records := byJob[f.ns+"/"+name]
		if fleetKind(name) == fleetTTL {
			if found[name] != nil || podsLeft[name] > 0 {
				mismatches = append(mismatches, fmt.Sprintf("%s: TTL job still there with %d pods", name, podsLeft[name]))
			}
			ended["deleted by TTL"]++
			continue
		}
		job := found[name]
		if job == nil {
			mismatches = append(mismatches, name+": gone")
			continue
		}
		got := statusOf(job)
		for _, p := range checkFleetJob(name, records, got) {
			mismatches = append(mismatches, name+": "+p)
		}
		if job.Status.Active != 0 || job.Status.UncountedTerminatedPods != nil {
			mismatches = append(mismatches, fmt.Sprintf("%s: active %d, uncounted %v after the end", name, job.Status.Active, job.Status.UncountedTerminatedPods))
		}
		ended[got.condition+" "+got.reason]++
	}
	violations := f.sim.Violations()
	figures := fmt.Sprintf("%d jobs of %d indexes (%s); %d pods run and checked, %d deleted while running; ended: %v; "+
		"last job ended %s after the chaos; invariant violations %d; mismatches %d",
		len(f.names), fleetIndexes, strings.Join(fleetKinds, ", "), len(truth), f.deleter.deleted.Load(), ended,
		time.Since(start).Round(time.Second), len(violations), len(mismatches))
	AddReportEntry("fleet figures", figures)
	fmt.Fprintln(GinkgoWriter, "fleet figures:", figures)
	Expect(violations).To(BeEmpty(), "what the operator must never do")
	Expect(mismatches).To(BeEmpty())
	Expect(f.deleter.deleted.Load()).To(BeNumerically(">", 0), "the deleter never deleted a running pod")
	return figures
}
