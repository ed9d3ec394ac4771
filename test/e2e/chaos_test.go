package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// The chaos runs' size and seed; the environment can change them
// (IBJ_CHAOS_INDEXES, IBJ_CHAOS_KILLS, IBJ_CHAOS_SEED). A failed run prints
// its seed: the same seed replays the same pod outcomes, though not the
// same interleaving.
type chaosConfig struct {
	indexes, parallelism int
	kills                int
	failovers            int
	seed                 uint64
	// failRate is the chance that a pod fails by itself.
	failRate float64
	// editJob, when set, changes the chaos job before it is created.
	editJob func(*ibjv1.IndexedBatchJob)
	// deleteEvery is the deleter's interval (deleterOptions); 250 ms unset.
	deleteEvery time.Duration
}

func loadChaosConfig() chaosConfig {
	GinkgoHelper()
	c := chaosConfig{indexes: 2000, parallelism: 40, kills: 20, failovers: 5, seed: uint64(time.Now().UnixNano()), failRate: 0.25}
	for env, dst := range map[string]*int{"IBJ_CHAOS_INDEXES": &c.indexes, "IBJ_CHAOS_KILLS": &c.kills} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			Expect(err).NotTo(HaveOccurred(), env)
			*dst = n
		}
	}
	if v := os.Getenv("IBJ_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		Expect(err).NotTo(HaveOccurred(), "IBJ_CHAOS_SEED")
		c.seed = n
	}
	return c
}

// simNode is the node the chaos jobs' pods are bound to: no node object
// and no kwok behind it, so the pod simulator alone plays their kubelet.
const simNode = "podsim-node"

// backoffLimitPerIndex of the chaos jobs.
const chaosBackoffLimitPerIndex = 1

// chaosRun is one chaos job: the simulator that runs its pods and keeps
// the truth, and a deleter that removes running pods at random, as users
// and evictions do.
type chaosRun struct {
	// edited are the UIDs of pods edited out of the job (startEditor),
	// whose end the job must not count and the simulator loses.
	edited sets.Set[string]

	cfg     chaosConfig
	ns, job string
	sim     *podsim.Simulator
	deleter *deleter
	stop    context.CancelFunc
}

func startChaosRun(ctx context.Context, ns, name string, cfg chaosConfig) *chaosRun {
	GinkgoHelper()
	fmt.Fprintf(GinkgoWriter, "chaos %s: %d indexes, parallelism %d, seed %d (IBJ_CHAOS_SEED replays the pod outcomes)\n",
		name, cfg.indexes, cfg.parallelism, cfg.seed)
	AddReportEntry("chaos seed", cfg.seed)
	cs, err := kubernetes.NewForConfig(cluster.Config)
	Expect(err).NotTo(HaveOccurred())
	runCtx, cancel := context.WithCancel(context.Background())
	r := &chaosRun{cfg: cfg, ns: ns, job: name, stop: cancel}
	DeferCleanup(r.Stop)

	outcomes := rand.New(rand.NewPCG(cfg.seed, 1))
	r.sim = podsim.New(podsim.Options{
		Client:        cs,
		Namespace:     ns,
		LabelSelector: ibjv1.JobNameLabel + "=" + name,
		IndexLabels:   []string{ibjv1.CompletionIndexLabel},
		Script: func(*corev1.Pod, int) podsim.Plan {
			plan := podsim.Plan{Run: 300*time.Millisecond + time.Duration(outcomes.Int64N(int64(2200*time.Millisecond)))}
			if outcomes.Float64() < cfg.failRate {
				plan.ExitCode = podsim.ExitFailed
			}
			return plan
		},
		Shutdown: 300 * time.Millisecond,
		Workers:  16,
	})
	Expect(r.sim.Run(runCtx)).To(Succeed())

	job := harness.MakeIndexedBatchJob(name, ns).
		Completions(int32(cfg.indexes)).Parallelism(int32(cfg.parallelism)).
		BackoffLimitPerIndex(chaosBackoffLimitPerIndex).PodReplacementPolicy(batchv1.Failed).Obj()
	job.Spec.Template.Spec.NodeName = simNode
	if cfg.editJob != nil {
		cfg.editJob(job)
	}
	Expect(k8sClient.Create(ctx, job)).To(Succeed())

	// The deleter: every 250-750 ms, delete one running pod with the
	// default grace period; the simulator stops it and fails it.
	r.deleter = startDeleter(runCtx, cs, ns, r.sim, rand.New(rand.NewPCG(cfg.seed, 2)), deleterOptions{interval: cmp.Or(cfg.deleteEvery, 250*time.Millisecond)})
	return r
}

// editedPod reports whether a violation the simulator recorded is about a
// pod edited out of the job: it loses such a pod, unfinished, as intended.
func (r *chaosRun) editedPod(violation string) bool {
	for uid := range r.edited {
		if strings.Contains(violation, uid) {
			return true
		}
	}
	return false
}

// Stop ends the deleter and the simulator.
func (r *chaosRun) Stop() {
	r.stop()
	r.deleter.wait()
}

// deleter deletes a running pod of a simulator at random now and then, as
// users and evictions do, with the default grace period (the simulator
// stops the pod and fails it).
type deleter struct {
	deleted atomic.Int64
	wg      sync.WaitGroup
}

// deleterOptions: a pod is deleted every interval to three times that;
// spare, when set, keeps a pod from deletion; deletedPod, when set, is told
// of each pod deleted. Both are called from the deleter's one goroutine.
type deleterOptions struct {
	interval   time.Duration
	spare      func(*corev1.Pod) bool
	deletedPod func(*corev1.Pod)
}

// startDeleter deletes sim's running pods at random until ctx ends.
func startDeleter(ctx context.Context, cs kubernetes.Interface, ns string, sim *podsim.Simulator, rng *rand.Rand,
	opts deleterOptions) *deleter {
	interval, spare := opts.interval, opts.spare
	d := &deleter{}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval + time.Duration(rng.Int64N(int64(2*interval)))):
			}
			running := sim.Running()
			if spare != nil {
				running = slices.DeleteFunc(running, spare)
			}
			if len(running) == 0 {
				continue
			}
			pod := running[rng.IntN(len(running))]
			err := cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &pod.UID},
			})
			if err == nil {
				d.deleted.Add(1)
				if opts.deletedPod != nil {
					opts.deletedPod(pod)
				}
			}
		}
	}()
	return d
}

// wait returns once the deleter stopped (its context ended).
func (d *deleter) wait() { d.wg.Wait() }

// terminal reports whether the job has its Complete or Failed condition.
func (r *chaosRun) terminal(ctx context.Context) bool {
	job := &ibjv1.IndexedBatchJob{}
	if err := k8sClient.Get(ctx, client.ObjectKey{Namespace: r.ns, Name: r.job}, job); err != nil {
		return false
	}
	return harness.ConditionReason(job, ibjv1.ConditionComplete) != "" || harness.ConditionReason(job, ibjv1.ConditionFailed) != ""
}

// verify waits for the job to end and for every tracking finalizer to go,
// then holds the job's status against the simulator's ground truth, and
// returns the figures of the run.
func (r *chaosRun) verify(ctx context.Context) string {
	GinkgoHelper()
	By("waiting for the job to end")
	Eventually(r.terminal).WithContext(ctx).WithTimeout(10*time.Minute).WithPolling(time.Second).Should(BeTrue(),
		"the job did not end; %d pods run so far", r.sim.Seen())

	By("waiting until no pod keeps the tracking finalizer")
	Eventually(func(g Gomega) {
		var left []string
		for _, p := range jobPods(ctx, r.ns, r.job) {
			if hasTrackingFinalizer(&p) {
				left = append(left, p.Name)
			}
		}
		g.Expect(left).To(BeEmpty(), "pods still holding %s", ibjv1.TrackingFinalizer)
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	r.Stop()

	By("holding the status against the simulator's ground truth")
	truth := r.sim.Truth()
	want := podsim.Expect(truth, r.cfg.indexes, chaosBackoffLimitPerIndex)
	job := getJob(ctx, r.ns, r.job)
	got := podsim.Outcome{
		Succeeded:        job.Status.Succeeded,
		Failed:           job.Status.Failed,
		CompletedIndexes: job.Status.CompletedIndexes,
		FailedIndexes:    ptr.Deref(job.Status.FailedIndexes, ""),
		Condition:        ibjv1.ConditionComplete,
	}
	if harness.ConditionReason(job, ibjv1.ConditionFailed) != "" {
		got.Condition = ibjv1.ConditionFailed
	}
	var mismatches []string
	if len(want.Unfinished) > 0 {
		mismatches = append(mismatches, fmt.Sprintf("job ended with indexes neither done nor out of retries: %v", want.Unfinished))
	}
	for _, f := range []struct {
		name      string
		got, want any
	}{
		{"succeeded", got.Succeeded, want.Succeeded},
		{"failed", got.Failed, want.Failed},
		{"completedIndexes", got.CompletedIndexes, want.CompletedIndexes},
		{"failedIndexes", got.FailedIndexes, want.FailedIndexes},
		{"condition", got.Condition, want.Condition},
	} {
		if f.got != f.want {
			mismatches = append(mismatches, fmt.Sprintf("%s: status says %v, the pods say %v", f.name, f.got, f.want))
		}
	}
	if want.Condition == ibjv1.ConditionFailed {
		if reason := harness.ConditionReason(job, ibjv1.ConditionFailed); reason != ibjv1.ReasonFailedIndexes {
			mismatches = append(mismatches, "Failed condition reason "+reason)
		}
	}
	if job.Status.Active != 0 || job.Status.UncountedTerminatedPods != nil {
		mismatches = append(mismatches, fmt.Sprintf("active %d, uncounted %v after the end", job.Status.Active, job.Status.UncountedTerminatedPods))
	}
	// Every pod left in the API agrees with the truth.
	recorded := map[string]corev1.PodPhase{}
	for _, t := range truth {
		recorded[string(t.UID)] = t.Phase
	}
	pods := jobPods(ctx, r.ns, r.job)
	for _, p := range pods {
		if phase, ok := recorded[string(p.UID)]; !ok || phase != p.Status.Phase {
			mismatches = append(mismatches, fmt.Sprintf("pod %s: phase %s in the API, %q in the truth", p.Name, p.Status.Phase, phase))
		}
	}
	violations := slices.DeleteFunc(r.sim.Violations(), r.editedPod)
	figures := fmt.Sprintf("%d indexes; %d pods run and checked (%d failed by themselves or on deletion, %d deleted while running, up to %d runs for one index); "+
		"final status %s, %d completed and %d failed indexes; invariant violations %d; mismatches %d",
		r.cfg.indexes, len(truth), want.Failed, r.deleter.deleted.Load(), want.MaxRuns,
		want.Condition, want.Completed, want.FailedCount,
		len(violations), len(mismatches))
	AddReportEntry("chaos figures", figures)
	fmt.Fprintln(GinkgoWriter, "chaos figures:", figures)
	Expect(violations).To(BeEmpty(), "what the operator must never do")
	Expect(mismatches).To(BeEmpty())
	Expect(r.deleter.deleted.Load()).To(BeNumerically(">", 0), "the deleter never deleted a running pod")
	Expect(want.Failed).To(BeNumerically(">", 0), "no pod failed: the run tested nothing of the retries")
	return figures
}

// noPanics fails if an operator log shows a panic, recovered or not.
func noPanics(logs []string) {
	GinkgoHelper()
	for _, path := range logs {
		data, err := os.ReadFile(path)
		Expect(err).NotTo(HaveOccurred())
		for _, bad := range []string{"panic:", "Observed a panic"} {
			Expect(string(data)).NotTo(ContainSubstring(bad), "in %s", path)
		}
	}
}

var _ = Describe("Chaos", Ordered, Label("chaos"), func() {
	BeforeAll(func() {
		// The chaos specs run operators of their own.
		op.stop()
		op = nil
		DeferCleanup(func() { op = startOperator() })
	})

	It("keeps a 2,000-index job exact while the operator is SIGKILLed at random 20 times and kube-apiserver restarts", func(ctx SpecContext) {
		cfg := loadChaosConfig()
		ns := newNamespace(ctx)
		// The job is admitted by the operator's webhook, so the first
		// operator runs (and is the first killed) when it is created.
		first := startOperator()
		run := startChaosRun(ctx, ns, "chaos", cfg)

		kills := rand.New(rand.NewPCG(cfg.seed, 3))
		var logs []string
		killed, restarted := 0, false
		for killed < cfg.kills {
			Expect(run.terminal(ctx)).To(BeFalse(),
				"the job ended after %d of %d kills: make it longer (IBJ_CHAOS_INDEXES) so every kill lands mid-run", killed, cfg.kills)
			var proc *controlplane.Process
			if first != nil {
				proc, first = first.proc, nil
			} else {
				proc, _ = launchOperator()
			}
			logs = append(logs, proc.LogPath)
			// Up to 3 s: some kills land before the cache has synced, some
			// in the middle of a sync, some between syncs.
			time.Sleep(200*time.Millisecond + time.Duration(kills.Int64N(int64(2800*time.Millisecond))))
			if killed == cfg.kills/2 && !restarted {
				By("restarting kube-apiserver under the running operator")
				Expect(cluster.RestartAPIServer(ctx)).To(Succeed())
				restarted = true
				time.Sleep(time.Duration(kills.Int64N(int64(2 * time.Second))))
			}
			exited, err := proc.Exited()
			Expect(exited).To(BeFalse(), "the operator exited by itself (%v); see %s", err, proc.LogPath)
			Expect(proc.Kill()).To(Succeed())
			killed++
		}
		Expect(run.terminal(ctx)).To(BeFalse(), "the job ended before the last kill")
		By(fmt.Sprintf("%d kills done with the job still running; one last operator runs it to the end", killed))
		last := startOperator()
		logs = append(logs, last.proc.LogPath)
		DeferCleanup(last.stop)

		figures := run.verify(ctx)
		noPanics(logs)
		AddReportEntry("chaos kills", fmt.Sprintf("operator SIGKILLed %d times, kube-apiserver restarted once; %s", killed, figures))
	}, SpecTimeout(20*time.Minute))

	It("hands a 2,000-index job from leader to standby each time the leader is SIGKILLed", func(ctx SpecContext) {
		cfg := loadChaosConfig()
		ns := newNamespace(ctx)
		leaderFlags := []string{
			"--leader-elect",
			"--leader-election-namespace=" + ns,
			"--leader-elect-lease-duration=4s",
			"--leader-elect-renew-deadline=3s",
			"--leader-elect-retry-period=500ms",
		}
		replicas := []*operator{startOperator(leaderFlags...), startOperator(leaderFlags...)}
		logs := []string{replicas[0].proc.LogPath, replicas[1].proc.LogPath}
		DeferCleanup(func() {
			for _, r := range replicas {
				r.stop()
			}
		})
		run := startChaosRun(ctx, ns, "failover", cfg)

		var takeovers []time.Duration
		for len(takeovers) < cfg.failovers {
			time.Sleep(3 * time.Second)
			Expect(run.terminal(ctx)).To(BeFalse(), "the job ended after %d of %d failovers", len(takeovers), cfg.failovers)
			var leader int
			Eventually(func() int {
				leader = -1
				for i, r := range replicas {
					if leads(r) {
						Expect(leader).To(Equal(-1), "two replicas say they lead")
						leader = i
					}
				}
				return leader
			}).WithTimeout(30 * time.Second).ShouldNot(Equal(-1))
			By(fmt.Sprintf("killing the leader, %s", replicas[leader].proc.LogPath))
			Expect(replicas[leader].proc.Kill()).To(Succeed())
			killedAt := time.Now()
			standby := replicas[1-leader]
			if len(takeovers) == 0 {
				By("answering admission from the standby, through the same URL, before it leads")
				expectRefused(ns, invalidTemplates[0])
			}
			Eventually(func() bool { return leads(standby) }).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).
				Should(BeTrue(), "the standby did not take over")
			takeovers = append(takeovers, time.Since(killedAt).Round(100*time.Millisecond))
			replicas[leader] = startOperator(leaderFlags...)
			logs = append(logs, replicas[leader].proc.LogPath)
		}
		figures := run.verify(ctx)
		noPanics(logs)
		AddReportEntry("failover", fmt.Sprintf("%d leader kills, standby took over after %v; %s", len(takeovers), takeovers, figures))
	}, SpecTimeout(20*time.Minute))
})

// leads reports whether an operator replica has acquired the leader lease.
func leads(o *operator) bool {
	data, err := os.ReadFile(o.proc.LogPath)
	return err == nil && strings.Contains(strings.ToLower(string(data)), "successfully acquired lease")
}
