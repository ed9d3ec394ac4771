// Command bench compares the IndexedBatchJob operator with the built-in Job
// controller (kube-controller-manager --controllers=job) on the same local
// control plane (the test harness's controlplane: etcd and kube-apiserver),
// the same workloads and the same pod simulator, which plays every kubelet
// as fast as the API server allows. Each run starts fresh controller
// processes and measures time to the terminal condition, controller CPU
// seconds, peak RSS and client requests.
//
// usage: go run ./test/bench [-quick] [-repeats 3] [-out docs/bench]
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

const (
	ours     = "indexed-batch-job"
	upstream = "built-in Job (kcm)"
)

type workload struct {
	Name          string
	Jobs          int // jobs created at once, each with these completions (0: one)
	Completions   int32
	Parallelism   int32
	FailMod       int    // every index i with i%FailMod==0 always fails (0: none)
	PerIndexLimit *int32 // backoffLimitPerIndex
	QPS, Burst    int    // both controllers' client limits (0: -qps and -burst)
	Repeats       int
	SkipUpstream  bool
	Targets       targets
	// Late, if set, is a second set of jobs created LateAfter the first
	// create (the mixed workload: small jobs behind a big one). Job p50/p99
	// are then the late jobs' own, and FirstSeconds the first job's time.
	Late      *workload
	LateAfter time.Duration
	// Timeout replaces -timeout for this workload's runs when longer.
	Timeout time.Duration
	// Sizes, if set, are the completions of each job (the mixed-size
	// fleet: Jobs is len(Sizes), each job's parallelism its size).
	Sizes []int32
	// Key names the workload for the report's tables of issue #42 (its
	// targets and the operator's cost per pod by size), whatever its flags
	// make its name.
	Key string
}

// The keys of the workloads the report's tables look up.
const (
	key1k         = "1k"
	key10k        = "10k"
	keyFleet      = "fleet"
	keyFailing    = "fleet with failures"
	keyMixedSizes = "mixed sizes"
	keyVaried     = "varied"
	keyBig        = "big"
)

// targets are the most the operator may take of the built-in controller's
// figure (0: no target).
type targets struct {
	Time, CPU, RSS, Requests, Finalizers, JobP50 float64
	// JobP99 is the jobs' p99 (of the late jobs, where the workload has
	// some); First applies to workloads with late jobs: the first job's own
	// time to terminal.
	JobP99, First float64
	// SmallP50 and SmallP99 apply to the mixed-size fleet: the p50 and p99
	// of its jobs of at most smallJob indexes; Smallest100P50 to a fleet of
	// sizes: the p50 of its smallestJobs smallest jobs.
	SmallP50, SmallP99, Smallest100P50 float64
}

// usual holds on every workload unless it sets its own: CPU ≤ 0.5x, peak
// RSS ≤ 0.35x, no more requests, and the last finalizer gone no later than
// 1.05x.
func usual(t targets) targets {
	t.CPU, t.RSS = cmp.Or(t.CPU, 0.5), cmp.Or(t.RSS, 0.35)
	t.Requests, t.Finalizers = 1.0, 1.05
	return t
}

// tighter is t with each target that o sets replaced by o's.
func (t targets) tighter(o targets) targets {
	t.Time, t.CPU, t.RSS = cmp.Or(o.Time, t.Time), cmp.Or(o.CPU, t.CPU), cmp.Or(o.RSS, t.RSS)
	t.Requests, t.Finalizers = cmp.Or(o.Requests, t.Requests), cmp.Or(o.Finalizers, t.Finalizers)
	t.JobP50, t.JobP99, t.First = cmp.Or(o.JobP50, t.JobP50), cmp.Or(o.JobP99, t.JobP99), cmp.Or(o.First, t.First)
	t.SmallP50, t.SmallP99 = cmp.Or(o.SmallP50, t.SmallP50), cmp.Or(o.SmallP99, t.SmallP99)
	t.Smallest100P50 = cmp.Or(o.Smallest100P50, t.Smallest100P50)
	return t
}

// issueRow is one row of issue #42's table of targets: the operator's
// figure over the built-in controller's, same run, equal QPS. Key names the
// workload that measures it (none: the benchmark has no such workload),
// whose targets these become.
type issueRow struct {
	Row, Key string
	Targets  targets
}

var issueTargets = []issueRow{
	{"fleet 1,000 jobs × 10", keyFleet, targets{Time: 0.5, JobP50: 0.35, JobP99: 0.5}},
	{"fleet with failures", keyFailing, targets{JobP50: 0.4}},
	{"mixed workload's small jobs", keyMixedSizes, targets{SmallP50: 0.3, SmallP99: 0.5, CPU: 0.7}},
	{"varied fleet at QPS 50, client-bound", keyVaried, targets{Time: 0.55, JobP99: 0.5, Smallest100P50: 0.3}},
	{"10,000 indexes", key10k, targets{CPU: 0.4}},
	{"100,000 indexes", keyBig, targets{Time: 0.55, CPU: 0.35, RSS: 0.25}},
}

// withIssueTargets tightens each workload's targets to its row of
// issueTargets.
func withIssueTargets(ws []workload) {
	for i := range ws {
		for _, row := range issueTargets {
			if row.Key != "" && row.Key == ws[i].Key {
				ws[i].Targets = ws[i].Targets.tighter(row.Targets)
			}
		}
	}
}

func (w workload) jobs() int {
	if w.Sizes != nil {
		return len(w.Sizes)
	}
	return max(w.Jobs, 1)
}

// job is the workload of its i-th job: the workload itself, or for the
// mixed-size fleet, its i-th size with every index at once.
func (w workload) job(i int) workload {
	if w.Sizes != nil {
		w.Completions, w.Parallelism = w.Sizes[i], w.Sizes[i]
	}
	return w
}

// mixedSizes is the mixed-size fleet: -mixed-sizes-jobs jobs of 1 to
// -mixed-sizes-max indexes (jobSizes, seeded with -mixed-sizes-seed),
// created together as the fleet is.
func mixedSizes() workload {
	sizes := jobSizes(*sizesJobs, *sizesMax, *sizesSeed)
	return workload{
		Name:  fmt.Sprintf("mixed sizes %d jobs x 1-%d", *sizesJobs, *sizesMax),
		Sizes: sizes, Repeats: *repeats, Key: keyMixedSizes, Targets: usual(targets{}),
	}
}

// variedFleet is a fleet of -varied-jobs jobs of 1 to -mixed-sizes-max
// indexes (jobSizes, the mixed-size fleet's law and seed), created
// together, at QPS 50 / burst 100: where the client's QPS, not the
// server, bounds both controllers, the operator needs one write per pod
// before a job ends and the built-in controller two.
func variedFleet() workload {
	return workload{
		Name:  fmt.Sprintf("varied fleet %d jobs x 1-%d at QPS 50/burst 100", *variedJobs, *sizesMax),
		Sizes: jobSizes(*variedJobs, *sizesMax, *sizesSeed), QPS: 50, Burst: 100,
		Repeats: *repeats, Key: keyVaried, Targets: usual(targets{}),
	}
}

// big is the one job of -big-indexes indexes (100,000), at parallelism
// 1,000, under both controllers unless -big-upstream=false.
func big() workload {
	return workload{
		Name: thousands(*bigIndexes) + "/p1000", Completions: int32(*bigIndexes), Parallelism: 1000,
		Repeats: *bigRepeats, SkipUpstream: !*bigUp, Key: keyBig, Targets: usual(targets{}), Timeout: time.Hour,
	}
}

// mixed is one big job, then small jobs created 10 s later, at QPS 20 /
// burst 30 (kube-controller-manager's own client defaults): how long a
// job with thousands of pods to create holds back the jobs behind it.
func mixed() workload {
	return workload{
		Name: mixedName(*mixedBig, *mixedSmall), Completions: int32(*mixedBig), Parallelism: 500,
		QPS: 20, Burst: 30, Repeats: 1, Timeout: time.Hour,
		Late:      &workload{Jobs: *mixedSmall, Completions: 10, Parallelism: 10},
		LateAfter: 10 * time.Second,
		Targets:   usual(targets{JobP99: 0.3, First: 1.0}),
	}
}

func mixedName(big, small int) string {
	return fmt.Sprintf("mixed %s/p500 then %d jobs x 10/p10 at QPS 20/burst 30", thousands(big), small)
}

// thousands writes 20000 as 20k.
func thousands(n int) string {
	if n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return strconv.Itoa(n)
}

func (w workload) limits() (int, int) {
	if w.QPS > 0 {
		return w.QPS, w.Burst
	}
	return *qps, *burst
}

// apfMode is how API Priority and Fairness saw the run's controllers.
func (r result) apfMode() string {
	switch {
	case r.FlowSchema:
		return "shipped FlowSchema"
	case r.APF:
		return "default FlowSchemas"
	}
	return "exempt"
}

type result struct {
	Workload   string
	Controller string
	Rep        int
	Seconds    float64 // create to the last job's terminal condition
	// FinalizerSeconds is create to the last tracking finalizer gone; CPU
	// and requests are counted over this longer interval.
	FinalizerSeconds float64
	PodsPerSec       float64
	// Jobs, JobsPerSec and the per-job latencies (each job's create to its
	// terminal condition) are set for every run; they matter for fleets.
	Jobs       int
	JobsPerSec float64
	JobP50     float64
	JobP99     float64
	// FirstSeconds is the first job's create to its terminal condition
	// (set where the workload has late jobs).
	FirstSeconds float64 `json:",omitempty"`
	// SmallJobs, SmallP50 and SmallP99 are the mixed-size fleet's jobs of
	// at most smallJob indexes: how many, and their latencies.
	SmallJobs int     `json:",omitempty"`
	SmallP50  float64 `json:",omitempty"`
	// Smallest100P50 is the p50 of a fleet of sizes' smallestJobs
	// smallest jobs (smallestLatencies).
	Smallest100P50 float64 `json:",omitempty"`
	SmallP99       float64 `json:",omitempty"`
	// OrderTau and InOrder compare the order a fleet's jobs were created
	// in with the order they finished in (finishOrder); Ordered says they
	// were measured (a run of more than one job).
	OrderTau float64 `json:",omitempty"`
	InOrder  float64 `json:",omitempty"`
	Ordered  bool    `json:",omitempty"`
	CPU      float64
	RSSMiB   float64
	// StartMiB is VmRSS just before the first create: the controller
	// started, its caches synced, no job yet (the floor under RSSMiB).
	StartMiB float64
	// AnonMiB is the peak of RssAnon, sampled every 100 ms.
	AnonMiB  float64
	Requests float64 // API requests (server side, audit log)
	// Throttled are the requests the API server answered 429 (API
	// Priority and Fairness), from the audit log; APF says the run's
	// controllers ran as on a cluster, under the default FlowSchemas
	// (runs before 2026-12-07, and -exempt ones, ran as system:masters
	// users, which APF exempts).
	Throttled int
	APF       bool `json:",omitempty"`
	// FlowSchema says the operator's shipped PriorityLevelConfiguration
	// and FlowSchema (config/flowcontrol) were installed (-flowschema): its
	// requests went to a priority level of its own.
	FlowSchema bool `json:",omitempty"`
	// CanarySeconds is the canary Deployment's scale-up, from its request
	// to all replicas Ready (-canary; 0: none); CanaryError why it was not
	// measured.
	CanarySeconds float64 `json:",omitempty"`
	CanaryError   string  `json:",omitempty"`
	// Server is what kube-apiserver and etcd did over the run, for every
	// client (the controller, the pod simulator, the canary and the
	// benchmark's watches).
	Server serverLoad `json:",omitzero"`
	// FinalizerHoldBound is, for the operator, the upper bound of the
	// lowest bucket of indexedbatchjob_counted_finalizer_hold_seconds that
	// holds every counted pod's hold from its end (finalizerHoldBound);
	// FinalizerWaitBound the same of
	// indexedbatchjob_counted_finalizer_release_wait_seconds, from the
	// status write that counted it.
	FinalizerHoldBound float64 `json:",omitempty"`
	FinalizerWaitBound float64 `json:",omitempty"`
	ClientReqs         float64 // rest_client_requests_total, where the controller exposes it
	Verbs              map[string]int
	OK                 bool
	Detail             string
}

var (
	quick      = flag.Bool("quick", false, "run only the 1,000-index workload, once")
	repeats    = flag.Int("repeats", 3, "repetitions of each run (median reported)")
	bigRepeats = flag.Int("big-repeats", 1, "repetitions of the 100,000-index run")
	skipBig    = flag.Bool("skip-big", false, "skip the 100,000-index workload")
	bigUp      = flag.Bool("big-upstream", true, "run the built-in controller on the 100,000-index workload too (=false: the operator alone)")
	bigIndexes = flag.Int("big-indexes", 100000, "indexes of the big workload (100,000)")
	outDir     = flag.String("out", "docs/bench", "where results.md, results.json, results.png and profile-top.txt go")
	manager    = flag.String("manager", "bin/manager", "the operator binary")
	assets     = flag.String("assets", os.Getenv("KUBEBUILDER_ASSETS"), "etcd, kube-apiserver and kube-controller-manager")
	qps        = flag.Int("qps", 200, "client QPS of both controllers")
	burst      = flag.Int("burst", 400, "client burst of both controllers")
	syncs      = flag.Int("syncs", 5, "--max-concurrent-reconciles / --concurrent-job-syncs")
	only       = flag.String("only", "", "run only workloads whose name contains this (=name: exactly this; a|b: either)")
	which      = flag.String("controllers", "both", "both, ours or upstream")
	reportOnly = flag.Bool("report-only", false, "rewrite results.md and results.png from results.json")
	profSecs   = flag.Int("profile-seconds", 60, "length of the operator's CPU profile, from the create of the profiled job")
	profWL     = flag.String("profile-workload", "10k/p500", "the workload whose first run of the operator is profiled")
	appendRes  = flag.Bool("append", false, "add to the runs already in results.json instead of starting afresh")
	oursArgs   = flag.String("ours-args", "", "extra flags for the operator, space separated")
	oursEnv    = flag.String("ours-env", "", "extra environment of the operator, space separated NAME=value")
	keep       = flag.Bool("keep", false, "keep the work directory (controller logs, audit log)")
	flowSchema = flag.Bool("flowschema", false, "install the operator's PriorityLevelConfiguration and FlowSchema (config/flowcontrol/flowcontrol.yaml), "+
		"so that its ServiceAccount's requests go to a priority level of their own")
	exempt = flag.Bool("exempt", false, "run both controllers as system:masters users, which API Priority and Fairness exempts; "+
		"by default the built-in one runs as system:kube-controller-manager (workload-high) and the operator as its ServiceAccount (workload-low)")
	timeout    = flag.Duration("timeout", 20*time.Minute, "limit of one run")
	fleetJobs  = flag.Int("fleet-jobs", 1000, "jobs in the fleet workload")
	failJobs   = flag.Int("failing-fleet-jobs", 200, "jobs in the fleet with failures (each with index 0 failing twice)")
	mixedBig   = flag.Int("mixed-big", 20000, "indexes of the mixed workload's big job")
	mixedSmall = flag.Int("mixed-small", 200, "small jobs (10 indexes each) of the mixed workload")
	sizesJobs  = flag.Int("mixed-sizes-jobs", 500, "jobs of the mixed-size fleet")
	sizesMax   = flag.Int("mixed-sizes-max", 200, "the most indexes of a job of the mixed-size fleet")
	sizesSeed  = flag.Uint64("mixed-sizes-seed", 1, "seed of the mixed-size fleet's sizes")
	variedJobs = flag.Int("varied-jobs", 300, "jobs of the varied fleet at QPS 50 (sizes as the mixed-size fleet's)")
)

func main() {
	flag.Parse()
	if *exempt && *flowSchema {
		log.Fatal("-exempt and -flowschema exclude each other: exempt users are never matched by a FlowSchema")
	}
	// The benchmark's own clients log nothing (API warnings included);
	// the controllers under test log to their files.
	crlog.SetLogger(logr.Discard())
	log.SetFlags(log.Ltime | log.Lmicroseconds)
	all, workloads := selectWorkloads()
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		log.Fatal(err)
	}
	if *reportOnly {
		if err := rewriteReport(all); err != nil {
			log.Fatal(err)
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, err := newBench(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer b.stop()
	results, profiled := b.runAll(ctx, workloads)
	if err := writeReport(*outDir, all, results); err != nil {
		log.Fatal(err)
	}
	if profiled {
		writeProfileTop(b.manager)
	}
	log.Printf("wrote %s", *outDir)
}

// failingFleet is the fleet with failures: -failing-fleet-jobs jobs of 10
// indexes created together, each with backoffLimitPerIndex 1 and index 0
// failing every time, so that it fails twice and fails its job
// (FailedIndexes) once the other indexes are done.
func failingFleet() workload {
	return workload{Name: fmt.Sprintf("fleet with failures %d jobs x 10/p10, index 0 failing twice", *failJobs), Jobs: *failJobs,
		Completions: 10, Parallelism: 10, FailMod: 10, PerIndexLimit: ptr.To[int32](1), Repeats: *repeats, Key: keyFailing,
		Targets: usual(targets{})}
}

// quickWorkload is the first workload, the only one -quick runs.
const quickWorkload = "1k/p100"

// selectWorkloads returns every workload (the report lists them in this
// order) and those this run measures, as the flags pick them.
func selectWorkloads() (all, workloads []workload) {
	fleet := workload{Name: "fleet 1,000 jobs x 10/p10", Jobs: *fleetJobs, Completions: 10, Parallelism: 10, Repeats: *repeats, Key: keyFleet, Targets: usual(targets{})}
	if *fleetJobs != 1000 {
		fleet.Name = fmt.Sprintf("fleet %d jobs x 10/p10", *fleetJobs)
	}
	workloads = []workload{
		{Name: quickWorkload, Completions: 1000, Parallelism: 100, Repeats: *repeats, Key: key1k, Targets: usual(targets{})},
		{Name: "10k/p500", Completions: 10000, Parallelism: 500, Repeats: *repeats, Key: key10k, Targets: usual(targets{Time: 0.6})},
		{Name: "10k/p500 10% failing, backoffLimitPerIndex=1", Completions: 10000, Parallelism: 500, FailMod: 10, PerIndexLimit: ptr.To[int32](1), Repeats: *repeats, Targets: usual(targets{Time: 0.75})},
		{Name: "10k/p500 unthrottled (QPS 1000/burst 2000)", Completions: 10000, Parallelism: 500, QPS: 1000, Burst: 2000, Repeats: *repeats, Targets: usual(targets{Time: 1.0, CPU: 0.7})},
		fleet,
		failingFleet(),
		mixedSizes(),
		variedFleet(),
		{Name: "2k/p500 at QPS 20/burst 30", Completions: 2000, Parallelism: 500, QPS: 20, Burst: 30, Repeats: *repeats, Targets: usual(targets{Time: 0.6})},
		mixed(),
		big(),
	}
	withIssueTargets(workloads)
	all = slices.Clone(workloads)
	if *quick {
		all = all[:1]
		workloads = workloads[:1]
		workloads[0].Repeats = 1
	}
	if *skipBig && !*quick {
		workloads = slices.DeleteFunc(workloads, func(w workload) bool { return w.Key == keyBig })
	}
	if *only != "" {
		workloads = slices.DeleteFunc(workloads, func(w workload) bool { return !picked(w.Name, *only) })
	}
	return all, workloads
}

// picked reports whether -only picks the workload name: one of its
// '|'-separated alternatives is the name ("=name") or part of it.
func picked(name, only string) bool {
	for alt := range strings.SplitSeq(only, "|") {
		exact, ok := strings.CutPrefix(alt, "=")
		if ok && name == exact || !ok && strings.Contains(name, alt) {
			return true
		}
	}
	return false
}

// rewriteReport rewrites results.md and the chart from results.json.
func rewriteReport(all []workload) error {
	var results []result
	b, err := os.ReadFile(filepath.Join(*outDir, "results.json"))
	if err == nil {
		err = json.Unmarshal(b, &results)
	}
	if err != nil {
		return err
	}
	return writeReport(*outDir, all, results)
}

// runAll runs each workload's repeats under each controller, the built-in
// one first, writing results.json after each run, and reports whether it
// profiled the operator.
func (b *bench) runAll(ctx context.Context, workloads []workload) (results []result, profiled bool) {
	if *appendRes {
		if data, err := os.ReadFile(filepath.Join(*outDir, "results.json")); err == nil {
			_ = json.Unmarshal(data, &results)
		}
	}
	if *canaryReplicas > 0 {
		r := b.canaryAlone(ctx)
		log.Printf("RESULT %s: %d replicas Ready in %.1fs %s", r.Workload, *canaryReplicas, r.CanarySeconds, r.Detail)
		results = append(results, r)
	}
	n := 0
	for _, w := range workloads {
		for rep := 1; rep <= w.Repeats; rep++ {
			for _, ctrl := range []string{upstream, ours} {
				if ctrl == upstream && (w.SkipUpstream || *which == "ours") || ctrl == ours && *which == "upstream" {
					continue
				}
				n++
				profile := ""
				if ctrl == ours && !profiled && w.Name == *profWL {
					profile = filepath.Join(*outDir, "cpu.pprof")
					profiled = true
				}
				r := b.run(ctx, w, ctrl, rep, n, profile)
				log.Printf("RESULT %-45s %-20s rep %d: %.1fs (finalizers %.1fs, job p50 %.1fs p99 %.1fs, first %.1fs, small p50 %.1fs p99 %.1fs, order tau %.2f in order %.2f) %.0f pods/s cpu %.1fs rss %.0fMiB req %.0f (client %.0f) ok=%v %s [%s]",
					r.Workload, r.Controller, rep, r.Seconds, r.FinalizerSeconds, r.JobP50, r.JobP99, r.FirstSeconds, r.SmallP50, r.SmallP99, r.OrderTau, r.InOrder,
					r.PodsPerSec, r.CPU, r.RSSMiB, r.Requests, r.ClientReqs, r.OK, r.Detail, verbSummary(r.Verbs))
				results = append(results, r)
				writeJSON(filepath.Join(*outDir, "results.json"), results)
				if !last(workloads, w, rep, ctrl) {
					b.wipe(ctx, fmt.Sprintf("bench-%02d", n))
				}
			}
		}
	}
	return results, profiled
}

// writeProfileTop writes profile-top.txt: pprof's top of the operator's
// CPU profile, flat and cumulative, and of its heap at the end of the run.
func writeProfileTop(mgrBin string) {
	const topFlag = "-top"
	var top []byte
	for _, run := range []struct {
		file string
		args []string
	}{
		{"cpu.pprof", []string{topFlag, "-nodecount=50"}},
		{"cpu.pprof", []string{topFlag, "-cum", "-nodecount=80"}},
		{"heap.pprof", []string{topFlag, "-sample_index=inuse_space", "-nodecount=30"}},
	} {
		args := append([]string{"tool", "pprof"}, run.args...)
		out, err := exec.Command("go", append(args, mgrBin, filepath.Join(*outDir, run.file))...).Output()
		if err != nil {
			log.Printf("pprof: %v", err)
		}
		top = append(top, []byte("$ go "+strings.Join(args, " ")+" manager "+run.file+"\n")...)
		top = append(top, out...)
		top = append(top, '\n')
	}
	_ = os.WriteFile(filepath.Join(*outDir, "profile-top.txt"), top, 0o644)
}

// last reports whether this is the last run, after which nothing needs wiping.
func last(ws []workload, w workload, rep int, ctrl string) bool {
	return w.Name == ws[len(ws)-1].Name && rep == w.Repeats && ctrl == ours
}

func writeJSON(p string, v any) {
	b, _ := json.MarshalIndent(v, "", "  ")
	_ = os.WriteFile(p, b, 0o644)
}

// bench is the benchmark's control plane and clients.
type bench struct {
	cp          *controlplane.ControlPlane
	auditLog    string
	cl          client.Client
	wcl         client.WithWatch
	cs          kubernetes.Interface
	work        string
	manager     string
	kubeconfigs map[string]string
	stopSim     context.CancelFunc
	// stopCanarySim stops the canary's pod simulator (-canary).
	stopCanarySim func()
}

// proc is a controller under test.
type proc struct {
	*controlplane.Process
	metricsURL string
	pprofURL   string
}

// start starts a fresh controller and returns once it serves its metrics
// and has had 2 s to sync its informers.
func (b *bench) start(ctrl string, n int, profile bool, qps, burst int) (*proc, error) {
	port, err := b.cp.FreePort()
	if err != nil {
		return nil, err
	}
	p := &proc{}
	if ctrl == ours {
		p.metricsURL = fmt.Sprintf("http://127.0.0.1:%d/metrics", port)
		err = b.startOperator(p, n, port, profile, qps, burst)
	} else {
		p.metricsURL = fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
		p.Process, err = b.cp.StartComponent(controlplane.ControllerManager, controlplane.Component{
			User: kcmUser, Port: port,
			Flags: []string{
				"--controllers=job",
				fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst),
				fmt.Sprintf("--concurrent-job-syncs=%d", *syncs),
				"--use-service-account-credentials=false",
				"--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
				"--authentication-skip-lookup",
			},
		})
	}
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := restRequests(p.metricsURL); err == nil {
			break
		} else if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("%s not ready (see %s): %v", ctrl, p.LogPath, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // informers synced, workers running
	return p, nil
}

// startOperator starts the operator as its user, its metrics on port, and
// with profile its pprof endpoint too.
func (b *bench) startOperator(p *proc, n, port int, profile bool, qps, burst int) error {
	args := []string{
		fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst),
		fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", port), "--metrics-secure=false",
		"--health-probe-bind-address=0", fmt.Sprintf("--max-concurrent-reconciles=%d", *syncs),
		"--kubeconfig=" + b.kubeconfigs[operatorUser],
	}
	args = append(args, strings.Fields(*oursArgs)...)
	if profile {
		pp, err := b.cp.FreePort()
		if err != nil {
			return err
		}
		args = append(args, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", pp))
		p.pprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile", pp)
	}
	logPath := filepath.Join(b.work, fmt.Sprintf("run%02d-%s.log", n, ours))
	var err error
	p.Process, err = controlplane.StartProcess("manager", logPath, strings.Fields(*oursEnv), b.manager, args...)
	return err
}

func (p *proc) stop() { _ = p.Stop(10 * time.Second) }

func template(w workload) corev1.PodTemplateSpec {
	labels := map[string]string{benchLabel: labelOn}
	if w.FailMod > 0 {
		labels[failModLabel] = strconv.Itoa(w.FailMod)
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []corev1.Container{{Name: "work", Image: "busybox:1.36", Command: []string{"true"}}},
		},
	}
}

type expectation struct {
	succeeded, failed    int32
	completed, failedIdx string
	condType, reason     string
}

func expect(w workload) expectation {
	var ok, bad []int
	for i := 0; i < int(w.Completions); i++ {
		if w.FailMod > 0 && i%w.FailMod == 0 {
			bad = append(bad, i)
		} else {
			ok = append(ok, i)
		}
	}
	e := expectation{succeeded: int32(len(ok)), completed: compress(ok), condType: "Complete", reason: batchv1.JobReasonCompletionsReached}
	if len(bad) > 0 {
		e.failed = int32(len(bad)) * (*w.PerIndexLimit + 1)
		e.failedIdx = compress(bad)
		e.condType, e.reason = "Failed", batchv1.JobReasonFailedIndexes
	}
	return e
}

func compress(xs []int) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i
		for j+1 < len(xs) && xs[j+1] == xs[j]+1 {
			j++
		}
		switch j {
		case i:
			parts = append(parts, strconv.Itoa(xs[i]))
		case i + 1:
			parts = append(parts, strconv.Itoa(xs[i]), strconv.Itoa(xs[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", xs[i], xs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// observed is the part of either status the benchmark checks.
type observed struct {
	terminal             bool
	condType, reason     string
	succeeded, failed    int32
	completed, failedIdx string
}

func (b *bench) newJob(w workload, ctrl, ns, name string) client.Object {
	if ctrl == ours {
		return &ibjv1.IndexedBatchJob{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: ibjv1.IndexedBatchJobSpec{
				Completions: w.Completions, Parallelism: ptr.To(w.Parallelism),
				BackoffLimitPerIndex: w.PerIndexLimit, Template: template(w),
			},
		}
	}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: batchv1.JobSpec{
			Completions: ptr.To(w.Completions), Parallelism: ptr.To(w.Parallelism),
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			BackoffLimitPerIndex: w.PerIndexLimit, Template: template(w),
		},
	}
}

// createJobs creates the workload's jobs at once (32 at a time, with the
// benchmark's unthrottled client) and returns their names and when each
// create was sent.
func (b *bench) createJobs(ctx context.Context, w workload, ctrl, ns, prefix string) ([]string, []time.Time, error) {
	names := make([]string, w.jobs())
	for i := range names {
		names[i] = prefix
		if w.jobs() > 1 {
			names[i] = fmt.Sprintf("%s-%04d", prefix, i)
		}
	}
	sent := make([]time.Time, len(names))
	errs := make(chan error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(32, len(names)) {
		wg.Go(func() {
			for i := range next {
				sent[i] = time.Now()
				if err := b.cl.Create(ctx, b.newJob(w.job(i), ctrl, ns, names[i])); err != nil {
					errs <- fmt.Errorf("create %s: %w", names[i], err)
				}
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	return names, sent, <-errs
}

// lateJobs are the late jobs of a mixed workload, as createJobs made them.
type lateJobs struct {
	names []string
	sent  []time.Time
	err   error
}

// percentile is the p-th percentile (0 < p ≤ 1) of xs, nearest rank.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[max(0, int(float64(len(s))*p+0.999999)-1)]
}

// runState is one run: its controller, its watches and what was measured
// before its first create.
type runState struct {
	w        workload
	ctrl     string
	n        int
	p        *proc
	jobs     *jobWatch
	fins     *finalizerWatch
	cpu0     float64
	req0     float64
	audit0   int64
	profDone chan []byte
	start    time.Time
	// server0 is kube-apiserver's and etcd's load before the first create.
	server0 serverLoad
}

// run measures one run of w under ctrl: it starts the controller, creates
// the jobs, waits for every terminal condition and every finalizer gone,
// and checks each job's status.
func (b *bench) run(ctx context.Context, w workload, ctrl string, rep, n int, profile string) result {
	r := result{Workload: w.Name, Controller: ctrl, Rep: rep, Jobs: w.jobs(), APF: !*exempt, FlowSchema: *flowSchema}
	ns := fmt.Sprintf("bench-%02d", n)
	if err := b.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		r.Detail = err.Error()
		return r
	}
	runCtx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	st := &runState{w: w, ctrl: ctrl, n: n, jobs: watchJobs(runCtx, b.wcl, ctrl, ns), fins: watchFinalizers(runCtx, b.wcl, ns)}
	qps, burst := w.limits()
	var err error
	if st.p, err = b.start(ctrl, n, profile != "", qps, burst); err != nil {
		r.Detail = err.Error()
		return r
	}
	defer st.p.stop()
	b.measureStart(ctx, st, &r, profile)
	canary := b.runCanary(ctx, st.start)
	names, sent, err := b.createJobs(ctx, w, ctrl, ns, "bench")
	if err != nil {
		r.Detail = err.Error()
		return r
	}
	late := b.createLate(ctx, st, ns)
	finalizersAt := st.wait(&r, len(names))
	l := <-late
	if l.err != nil {
		r.Detail = strings.TrimSpace(r.Detail + " " + l.err.Error())
	}
	end := time.Now()
	b.measureEnd(ctx, st, &r)
	st.check(&r, names, sent, l, end, finalizersAt)
	if c := <-canary; c.err != nil {
		r.CanaryError = c.err.Error()
	} else {
		r.CanarySeconds = c.seconds
	}
	if profile != "" {
		st.saveProfile(profile)
	}
	return r
}

// measureStart reads the controller's CPU, requests and RSS and the audit
// log's size before the first create, starts its CPU profile if asked,
// and starts the clock.
func (b *bench) measureStart(ctx context.Context, st *runState, r *result, profile string) {
	pid := st.p.Pid()
	st.server0 = b.serverLoad(ctx)
	st.cpu0, _ = cpuSeconds(pid)
	st.req0, _ = restRequests(st.p.metricsURL)
	st.audit0 = fileSize(b.auditLog)
	st.profDone = make(chan []byte, 1)
	if profile != "" {
		go func() {
			resp, err := http.Get(fmt.Sprintf("%s?seconds=%d", st.p.pprofURL, *profSecs))
			if err != nil {
				log.Printf("pprof: %v", err)
				st.profDone <- nil
				return
			}
			defer resp.Body.Close()
			data, _ := io.ReadAll(resp.Body)
			st.profDone <- data
		}()
	}
	r.StartMiB, _ = rssMiB(pid)
	st.start = time.Now()
}

// createLate creates a mixed workload's late jobs LateAfter the start;
// the channel has them (none for other workloads).
func (b *bench) createLate(ctx context.Context, st *runState, ns string) <-chan lateJobs {
	late := make(chan lateJobs, 1)
	if st.w.Late == nil {
		late <- lateJobs{}
		return late
	}
	go func() {
		time.Sleep(time.Until(st.start.Add(st.w.LateAfter)))
		var l lateJobs
		l.names, l.sent, l.err = b.createJobs(ctx, *st.w.Late, st.ctrl, ns, "late")
		late <- l
	}()
	return late
}

// wait waits for every job's terminal condition, then for every tracking
// finalizer to be gone, sampling the controller's anonymous RSS, and
// returns when the last finalizer went (zero on a timeout).
func (st *runState) wait(r *result, first int) time.Time {
	total := first
	if st.w.Late != nil {
		total += st.w.Late.jobs()
	}
	deadline := st.start.Add(max(*timeout, st.w.Timeout))
	for {
		time.Sleep(100 * time.Millisecond)
		if anon, err := anonRSSMiB(st.p.Pid()); err == nil {
			r.AnonMiB = max(r.AnonMiB, anon)
		}
		if st.jobs.terminal() == total {
			if left, at := st.fins.remaining(); left == 0 {
				return at
			}
		}
		if time.Now().After(deadline) {
			left, _ := st.fins.remaining()
			r.Detail = fmt.Sprintf("timeout: %d/%d jobs terminal, %d pods hold a finalizer", st.jobs.terminal(), total, left)
			return time.Time{}
		}
	}
}

// measureEnd reads the controller's CPU, peak RSS and requests (its own
// count and the audit log's) after the run, and keeps its metrics.
func (b *bench) measureEnd(ctx context.Context, st *runState, r *result) {
	pid := st.p.Pid()
	r.Server = b.serverLoad(ctx).minus(st.server0)
	cpu1, _ := cpuSeconds(pid)
	r.CPU = cpu1 - st.cpu0
	r.RSSMiB, _ = peakRSSMiB(pid)
	if req1, err := restRequests(st.p.metricsURL); err == nil {
		r.ClientReqs = req1 - st.req0
	}
	time.Sleep(300 * time.Millisecond)
	user := operatorUser
	if st.ctrl == upstream {
		user = kcmUser
	}
	cnt, verbs, throttled := auditCount(b.auditLog, st.audit0, user, canaryAgents...)
	r.Requests, r.Verbs, r.Throttled = float64(cnt), verbs, throttled
	if resp, err := metricsClient.Get(st.p.metricsURL); err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if st.ctrl == ours {
			r.FinalizerHoldBound = finalizerHoldBound(string(data), holdMetric)
			r.FinalizerWaitBound = finalizerHoldBound(string(data), waitMetric)
		}
		_ = os.WriteFile(filepath.Join(b.work, fmt.Sprintf("run%02d.metrics", st.n)), data, 0o644)
	}
}

// check holds each job's last status against the expected one and sets
// the run's times, rates and latencies.
func (st *runState) check(r *result, names []string, sent []time.Time, l lateJobs, end, finalizersAt time.Time) {
	last, terminalAt := st.jobs.snapshot()
	var lastTerminal time.Time
	var latencies, lateLatencies []float64
	var finished []jobTimes
	var pods int32
	var bad []string
	badJobs := 0
	checkJobs := func(w workload, names []string, sent []time.Time, lat *[]float64) {
		for i, name := range names {
			o := last[name]
			pods += o.succeeded + o.failed
			if at, ok := terminalAt[name]; ok {
				*lat = append(*lat, at.Sub(sent[i]).Seconds())
				finished = append(finished, jobTimes{size: w.job(i).Completions,
					created: sent[i].Sub(st.start).Seconds(), finished: at.Sub(st.start).Seconds()})
				if at.After(lastTerminal) {
					lastTerminal = at
				}
			}
			if wrong := expect(w.job(i)).check(o); len(wrong) > 0 {
				badJobs++
				if badJobs <= 3 {
					bad = append(bad, name+": "+strings.Join(wrong, "; "))
				}
			}
		}
	}
	checkJobs(st.w, names, sent, &latencies)
	if st.w.Late != nil {
		checkJobs(*st.w.Late, l.names, l.sent, &lateLatencies)
		if len(latencies) > 0 {
			r.FirstSeconds = latencies[0]
		}
		latencies = lateLatencies
		names = append(names, l.names...)
	}
	if badJobs > 3 {
		bad = append(bad, fmt.Sprintf("and %d more jobs", badJobs-3))
	}
	st.times(r, cmp.Or(lastTerminal, end), cmp.Or(finalizersAt, end), float64(pods), len(names), latencies)
	r.OrderTau, r.InOrder, r.Ordered = finishOrder(finished)
	if st.w.Sizes != nil {
		small := smallLatencies(finished)
		r.SmallJobs, r.SmallP50, r.SmallP99 = len(small), percentile(small, 0.5), percentile(small, 0.99)
		r.Smallest100P50 = percentile(smallestLatencies(finished, smallestJobs), 0.5)
	}
	r.OK = r.Detail == "" && badJobs == 0
	if len(bad) > 0 {
		r.Detail = strings.TrimSpace(r.Detail + " " + strings.Join(bad, "; "))
	}
}

// times sets the run's times from its start, its rates and its jobs'
// latency percentiles.
func (st *runState) times(r *result, lastTerminal, finalizersAt time.Time, pods float64, jobs int, latencies []float64) {
	if finalizersAt.Before(lastTerminal) {
		// The last finalizer went before the terminal condition was written,
		// as the built-in controller orders it.
		finalizersAt = lastTerminal
	}
	r.Seconds = lastTerminal.Sub(st.start).Seconds()
	r.FinalizerSeconds = finalizersAt.Sub(st.start).Seconds()
	r.PodsPerSec = pods / r.Seconds
	r.JobsPerSec = float64(jobs) / r.Seconds
	r.JobP50, r.JobP99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
}

// saveProfile writes the operator's CPU profile to path, and its heap at
// the end of the run, with every pod of the job cached, beside it.
func (st *runState) saveProfile(path string) {
	if data := <-st.profDone; len(data) > 0 {
		_ = os.WriteFile(path, data, 0o644)
	}
	heapURL := strings.TrimSuffix(st.p.pprofURL, "profile") + "heap"
	if resp, err := http.Get(heapURL); err == nil {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = os.WriteFile(filepath.Join(filepath.Dir(path), "heap.pprof"), data, 0o644)
	}
}

// check lists how a job's status differs from the expected one.
func (e expectation) check(o observed) []string {
	var bad []string
	chk := func(what string, got, want any) {
		if got != want {
			g, wnt := fmt.Sprint(got), fmt.Sprint(want)
			if len(g) > 60 {
				g = g[:60] + "..."
			}
			if len(wnt) > 60 {
				wnt = wnt[:60] + "..."
			}
			bad = append(bad, fmt.Sprintf("%s=%s want %s", what, g, wnt))
		}
	}
	chk("terminal", o.terminal, true)
	chk("condition", o.condType, e.condType)
	chk("reason", o.reason, e.reason)
	chk("succeeded", o.succeeded, e.succeeded)
	chk("failed", o.failed, e.failed)
	chk("completedIndexes", o.completed, e.completed)
	chk("failedIndexes", o.failedIdx, e.failedIdx)
	return bad
}

// wipe deletes the run's objects and pods, so that the next controller's
// caches start from the same empty state.
func (b *bench) wipe(ctx context.Context, ns string) {
	if err := b.resetCanary(ctx); err != nil {
		log.Printf("wipe: %v", err)
	}
	_ = b.cl.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(ns))
	_ = b.cl.DeleteAllOf(ctx, &ibjv1.IndexedBatchJob{}, client.InNamespace(ns))
	var ibjs ibjv1.IndexedBatchJobList
	if err := b.cl.List(ctx, &ibjs, client.InNamespace(ns)); err == nil {
		for i := range ibjs.Items {
			_ = b.cl.Patch(ctx, &ibjs.Items[i], client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		}
	}
	for range 60 {
		pods, err := b.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			log.Printf("wipe %s: %v", ns, err)
			return
		}
		if len(pods.Items) == 0 {
			break
		}
		for i := range pods.Items {
			pod := &pods.Items[i]
			if len(pod.Finalizers) > 0 {
				_, err := b.cs.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType,
					[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					log.Printf("wipe %s/%s: %v", ns, pod.Name, err)
				}
			}
		}
		_ = b.cs.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{})
		time.Sleep(time.Second)
	}
	_ = b.cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}
