package main

import (
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// agg is the median of a workload's runs under one controller.
type agg struct {
	n, ok                                           int
	seconds, pps, cpu, rss, start, anon, req, creqs float64
	fin, jobsPerSec, p50, p99, first                float64
	// pods is the median of succeeded + failed pods; smallP50 and smallP99
	// the mixed-size fleet's small jobs' latencies; tau and inOrder how its
	// jobs' finish order followed their creation order, over the ordered
	// runs (ordered of them).
	pods, smallP50, smallP99, tau, inOrder float64
	smallest100P50                         float64
	ordered                                int
	verbs                                  map[string]int
	details                                []string
	// server is the median of kube-apiserver's and etcd's load over the
	// runs, canary the canary's scale-up (of the runs that measured it,
	// canaries of them), and apf the first run's mode.
	server   serverLoad
	canary   float64
	canaries int
	apf      string
}

// mib writes a measured MiB figure, — where it was not measured.
func mib(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func aggregate(rs []result, wl, ctrl string) (agg, bool) {
	var a agg
	var sec, pps, cpu, rss, start, anon, req, creq, fin, jps, p50, p99, first []float64
	var pods, smallP50, smallP99, tau, inOrder, smallest []float64
	var srvCPU, etcdCPU, srvReq, srvWrites, canary []float64
	for _, r := range rs {
		if r.Workload != wl || r.Controller != ctrl {
			continue
		}
		if a.n == 0 {
			a.apf = r.apfMode()
		}
		a.n++
		srvCPU, etcdCPU = append(srvCPU, r.Server.APIServerCPU), append(etcdCPU, r.Server.EtcdCPU)
		srvReq, srvWrites = append(srvReq, r.Server.Requests), append(srvWrites, r.Server.Writes)
		if r.CanarySeconds > 0 {
			canary = append(canary, r.CanarySeconds)
		}
		if r.OK {
			a.ok++
		}
		if r.Detail != "" {
			a.details = append(a.details, r.Detail)
		}
		sec, pps, cpu = append(sec, r.Seconds), append(pps, r.PodsPerSec), append(cpu, r.CPU)
		rss, req, creq = append(rss, r.RSSMiB), append(req, r.Requests), append(creq, r.ClientReqs)
		anon = append(anon, r.AnonMiB)
		if r.StartMiB > 0 { // not measured before 2026-11-25
			start = append(start, r.StartMiB)
		}
		fin, jps = append(fin, r.FinalizerSeconds), append(jps, r.JobsPerSec)
		p50, p99, first = append(p50, r.JobP50), append(p99, r.JobP99), append(first, r.FirstSeconds)
		pods = append(pods, math.Round(r.PodsPerSec*r.Seconds))
		smallP50, smallP99 = append(smallP50, r.SmallP50), append(smallP99, r.SmallP99)
		smallest = append(smallest, r.Smallest100P50)
		if r.Ordered {
			a.ordered++
			tau, inOrder = append(tau, r.OrderTau), append(inOrder, r.InOrder)
		}
		if a.verbs == nil {
			a.verbs = r.Verbs
		}
	}
	a.seconds, a.pps, a.cpu, a.rss, a.req, a.creqs = median(sec), median(pps), median(cpu), median(rss), median(req), median(creq)
	a.anon, a.start = median(anon), median(start)
	a.fin, a.jobsPerSec, a.p50, a.p99, a.first = median(fin), median(jps), median(p50), median(p99), median(first)
	a.pods, a.smallP50, a.smallP99, a.tau, a.inOrder = median(pods), median(smallP50), median(smallP99), median(tau), median(inOrder)
	a.smallest100P50 = median(smallest)
	a.server = serverLoad{APIServerCPU: median(srvCPU), EtcdCPU: median(etcdCPU), Requests: median(srvReq), Writes: median(srvWrites)}
	a.canary, a.canaries = median(canary), len(canary)
	return a, a.n > 0
}

func sh(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return "?"
	}
	return strings.TrimRight(string(out), "\n ")
}

type ratio struct {
	workload                                 string
	time, fin, cpu, rss, anon, req, p50, p99 float64
	targets                                  targets
}

// printer appends a formatted line to the report.
type printer func(format string, args ...any)

// writeReport writes results.md and results.png into dir: the machine and
// setup, each workload's medians, the ratios against the targets, the
// requests by verb and every run.
func writeReport(dir string, ws []workload, rs []result) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	writeSetup(p)
	ratios, bigOK := writeResults(p, ws, rs)
	writeTargets(p, ratios, ws, rs, bigOK)
	writeIssueTargets(p, ws, rs)
	writeFleets(p, ws, rs)
	writeScaling(p, ws, rs)
	writeServer(p, ws, rs)
	writeRuns(p, ws, rs)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	return drawChart(filepath.Join(dir, "results.png"), ratios)
}

// writeSetup writes the machine and how the benchmark runs.
func writeSetup(p printer) {
	p("# Benchmark: indexed-batch-job vs the built-in Job controller\n\n")
	p("Generated by `make bench` (`go run ./test/bench`) on %s. Raw runs: `results.json`; chart: `results.png`;\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	p("CPU profile of the operator during the 10,000-index run: `profile-top.txt` (`cpu.pprof`).\n\n")
	p("## Machine\n\n")
	p("- CPUs (`nproc`): %s\n", sh("nproc"))
	p("- memory (`free -g`):\n\n```\n%s\n```\n\n", sh("free", "-g"))
	p("- kernel (`uname -r`): %s\n", sh("uname", "-r"))
	p("- Go: %s; Kubernetes (kube-apiserver, kube-controller-manager): v1.37.2, with etcd v3.7.0, built from source by `hack/build-controlplane.sh`\n\n", runtime.Version())
	p("## Setup\n\n")
	p("- One local control plane (the test harness's `controlplane`: etcd + kube-apiserver), no scheduler, no kubelet, no garbage collector.\n")
	p("- Controllers under test run as separate, fresh processes per run, with client QPS %d / burst %d (unless the workload names other limits) and %d concurrent syncs. By default each runs as it does on a cluster, under the API server's default FlowSchemas of API Priority and Fairness: the built-in controller as `system:kube-controller-manager` (priority level `workload-high`, with the bootstrap ClusterRole `system:controller:job-controller`), the operator as its ServiceAccount (`service-accounts`, `workload-low`, with its install's ClusterRole); runs marked `exempt` in the APF column ran both as `system:masters` users (`-exempt`), which APF exempts, and runs marked `shipped FlowSchema` had the operator's PriorityLevelConfiguration and FlowSchema installed (`-flowschema`, `config/flowcontrol/flowcontrol.yaml`), which give its ServiceAccount a priority level of its own. The 429s each side received are counted from the audit log:\n", *qps, *burst, *syncs)
	p("  - this operator: `bin/bench-manager --kube-api-qps=%d --kube-api-burst=%d --max-concurrent-reconciles=%d` (defaults `--pod-failure-backoff=10s`, the same as upstream's fixed 10 s, and `--kube-api-throttle-tick=250ms`: the same token bucket, its held-back requests released together every 250 ms), built as the image builds its entrypoint `/manager` (`CGO_ENABLED=0 go build -trimpath -ldflags=\"-s -w\"`, with the Kueue integration, which waits for Kueue's API; kube-controller-manager is built `-trimpath -ldflags \"-s -w\"` too);\n", *qps, *burst, *syncs)
	p("  - the built-in controller: `kube-controller-manager --controllers=job --kube-api-qps=%d --kube-api-burst=%d --concurrent-job-syncs=%d --leader-elect=false`.\n", *qps, *burst, *syncs)
	p("- Pods are finished by one pod simulator (`test/harness/podsim`, in the benchmark process) that plays every kubelet: for each new pod it writes, in one status update, phase `Succeeded` (or `Failed`, exit code 1, for the always-failing indexes) with a terminated container status; a pod being deleted is failed. Same simulator for both controllers.\n")
	p("- Time to terminal: from the first create request to the last job's terminal condition (`Complete`/`Failed` = True), seen through a watch. Last finalizer gone: from the same start until no pod of the run holds a tracking finalizer (the built-in controller removes them before it writes the terminal condition; this operator may release a counted pod's finalizer after it). Pods/s: (succeeded + failed pods) / time to terminal. Per job (fleets): each job's own create to its terminal condition, p50 and p99.\n")
	p("- The fleet creates its jobs together, 32 creates in flight, from the benchmark's unthrottled client. The mixed-size fleet creates its jobs of 1 to %d indexes the same way (sizes drawn from a fixed seed, the same for both controllers; see its section below). The mixed workload creates its big job, then 10 s later its small jobs the same way; its job p50 / p99 are the small jobs' own.\n", *sizesMax)
	p("- CPU: utime+stime delta of the controller process from the first create until the last finalizer is gone (`/proc/<pid>/stat`); peak RSS: `VmHWM` at the end of the run (includes start-up and the binary's mapped pages); RSS at start: `VmRSS` just before the first create, with the controller started and idle (the floor under its peak; — where a run did not measure it); peak anon: the highest `RssAnon` sampled every 100 ms (heap, stacks and runtime, without the binary; no target, shown because the two binaries differ in size).\n")
	p("- API requests: requests by the controller's user, counted on the server side from the API server's audit log (metadata level, one event per finished request, watches included), over the same interval (to the last finalizer gone). kube-controller-manager does not expose `rest_client_requests_total`; for the operator, the client-side `rest_client_requests_total` delta agrees (see `results.json`, `ClientReqs`).\n")
	p("- Status check: condition and reason, `succeeded`, `failed`, `completedIndexes`, `failedIndexes` against the exact expected values.\n")
	p("- Objects and pods are wiped between runs. Numbers are medians of the runs listed in the `runs` column.\n")
	p("- Note: both controllers need about 2 requests per pod (create, then the tracking-finalizer removal), so at QPS %d neither can remove finalizers faster than about %d pods/s once its burst of %d is spent. The built-in controller removes a pod's finalizer before it creates more pods; this operator creates first and releases the finalizers of pods whose index is already in the written status with the client's spare capacity, so its terminal condition is bounded by one request per pod on the critical path.\n\n", *qps, *qps/2, *burst)

}

// writeResults writes each workload's medians under each controller, and
// returns the ratios where both ran and the 100,000-index verdict.
func writeResults(p printer, ws []workload, rs []result) (ratios []ratio, bigOK string) {
	p("## Results (medians)\n\n")
	p("| workload | controller | runs | time to terminal (s) | last finalizer gone (s) | pods/s | jobs/s | job p50 / p99 (s) | CPU (s) | peak RSS (MiB) | RSS at start (MiB) | peak anon (MiB) | API requests | status check |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, w := range ws {
		up, hasUp := aggregate(rs, w.Name, upstream)
		us, hasUs := aggregate(rs, w.Name, ours)
		for _, x := range []struct {
			name string
			a    agg
			has  bool
		}{{upstream, up, hasUp}, {ours, us, hasUs}} {
			if !x.has {
				continue
			}
			check := fmt.Sprintf("OK %d/%d", x.a.ok, x.a.n)
			if x.a.ok != x.a.n {
				check = fmt.Sprintf("**FAILED %d/%d**: %s", x.a.n-x.a.ok, x.a.n, strings.Join(x.a.details, "; "))
			}
			p("| %s | %s | %d | %.1f | %.1f | %.0f | %.1f | %.1f / %.1f | %.1f | %.0f | %s | %.0f | %.0f | %s |\n", w.Name, x.name, x.a.n, x.a.seconds, x.a.fin, x.a.pps, x.a.jobsPerSec, x.a.p50, x.a.p99, x.a.cpu, x.a.rss, mib(x.a.start), x.a.anon, x.a.req, check)
		}
		if hasUp && hasUs {
			ratios = append(ratios, ratio{
				workload: w.Name, time: us.seconds / up.seconds, fin: us.fin / up.fin,
				cpu: us.cpu / up.cpu, rss: us.rss / up.rss, anon: us.anon / up.anon, req: us.req / up.req,
				p50: us.p50 / up.p50, p99: us.p99 / up.p99, targets: w.Targets,
			})
		}
		if w.Key == keyBig && hasUs {
			if us.ok == us.n {
				bigOK = fmt.Sprintf("met: the %s job finished with exactly the expected status in %d/%d runs (%.0f s, %.0f pods/s).", w.Name, us.ok, us.n, us.seconds, us.pps)
			} else {
				bigOK = fmt.Sprintf("**not met**: %d/%d runs had a wrong status: %s", us.n-us.ok, us.n, strings.Join(us.details, "; "))
			}
		}
	}
	return ratios, bigOK
}

// writeTargets writes the operator's medians over the built-in
// controller's against the workloads' targets.
func writeTargets(p printer, ratios []ratio, ws []workload, rs []result, bigOK string) {
	p("\n## Against the targets (operator / built-in, medians)\n\n")
	p("Each cell is the operator's median over the built-in controller's, with the workload's target in brackets (— where the workload has none). ")
	p("Every run's status is checked exactly (last column of the results).\n\n")
	p("| workload | time to terminal | last finalizer gone | job p50 | job p99 | CPU | peak RSS | API requests | peak anon (no target) |\n")
	p("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for _, r := range ratios {
		t := r.targets
		p("| %s | %s | %s | %s | %s | %s | %s | %s | %.2fx |\n", r.workload, met(r.time, t.Time), met(r.fin, t.Finalizers),
			met(r.p50, t.JobP50), met(r.p99, t.JobP99), met(r.cpu, t.CPU), met(r.rss, t.RSS), metTo(3, r.req, t.Requests), r.anon)
	}
	writeMixed(p, ws, rs)
	if bigOK == "" {
		bigOK = "not measured in this run."
	}
	p("\nBig workload exact: %s\n\n", bigOK)
}

// metTo writes v with prec decimals against its target: requests sit near
// their target of 1.00x and get three.
func metTo(prec int, v, target float64) string {
	switch {
	case target == 0:
		return fmt.Sprintf("%.*fx (—)", prec, v)
	case v <= target:
		return fmt.Sprintf("%.*fx (≤ %.2f) met", prec, v, target)
	default:
		return fmt.Sprintf("%.*fx (≤ %.2f) **not met**", prec, v, target)
	}
}

// met writes a ratio with two decimals against its target.
func met(v, target float64) string { return metTo(2, v, target) }

// writeRuns writes the requests by verb of each workload and every run.
func writeRuns(p printer, ws []workload, rs []result) {
	p("## Requests by verb (first run of each)\n\n| workload | controller | top requests |\n| --- | --- | --- |\n")
	for _, w := range ws {
		for _, c := range []string{upstream, ours} {
			if a, ok := aggregate(rs, w.Name, c); ok {
				p("| %s | %s | %s |\n", w.Name, c, verbSummary(a.verbs))
			}
		}
	}
	p("\n## All runs\n\n| workload | controller | APF | run | time (s) | last finalizer (s) | pods/s | job p50 / p99 (s) | CPU (s) | peak RSS (MiB) | RSS at start (MiB) | peak anon (MiB) | API requests | 429s | counted finalizer held ≤ (s), from the pod's end / from its count | canary scale-up (s) | kube-apiserver CPU (s) / requests | status |\n| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for _, r := range rs {
		if r.Workload == canaryAloneWorkload {
			continue // in the section of the API server and the canary
		}
		st := "OK"
		if !r.OK {
			st = "FAILED: " + r.Detail
		}
		p("| %s | %s | %s | %d | %.1f | %.1f | %.0f | %.1f / %.1f | %.1f | %.0f | %s | %.0f | %.0f | %d | %s | %s | %s | %s |\n", r.Workload, r.Controller, r.apfMode(), r.Rep, r.Seconds, r.FinalizerSeconds, r.PodsPerSec, r.JobP50, r.JobP99, r.CPU, r.RSSMiB, mib(r.StartMiB), r.AnonMiB, r.Requests, r.Throttled, holdBound(r.FinalizerHoldBound)+" / "+holdBound(r.FinalizerWaitBound), canaryTime(r), serverFigures(r.Server), st)
	}
}

// canaryTime writes a run's canary scale-up: — without one.
func canaryTime(r result) string {
	switch {
	case r.CanaryError != "":
		return "not ready: " + r.CanaryError
	case r.CanarySeconds == 0:
		return "—"
	}
	return fmt.Sprintf("%.1f", r.CanarySeconds)
}

// serverFigures writes kube-apiserver's CPU and requests: — where the run
// did not measure them.
func serverFigures(l serverLoad) string {
	if l.Requests == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f / %.0f", l.APIServerCPU, l.Requests)
}

// writeServer writes, for each workload and controller, what the API
// server and etcd spent on the run, for every client together, its CPU per
// request and per write, and the canary's scale-up beside its time alone.
func writeServer(p printer, ws []workload, rs []result) {
	alone, hasAlone := aggregate(rs, canaryAloneWorkload, noController)
	head := false
	for _, w := range ws {
		for _, ctrl := range []string{upstream, ours} {
			a, ok := aggregate(rs, w.Name, ctrl)
			if !ok || a.server.Requests == 0 && a.canaries == 0 {
				continue
			}
			if !head {
				p("## The API server and the canary\n\n")
				p("kube-apiserver's and etcd's CPU (`/proc/<pid>/stat`) and the requests kube-apiserver finished (`apiserver_request_total`, every client: the controller, the pod simulator, the canary and the benchmark's watches; writes are its POST, PUT, PATCH, DELETE and APPLY), over the same interval as the controller's; medians. ")
				p("The canary is a Deployment scaled from 0 to `-canary` replicas `-canary-after` into each run by kube-controller-manager's deployment and replicaset controllers (as `system:kube-controller-manager`), timed to all replicas Ready.")
				if hasAlone {
					p(" Alone, with no controller under test running: %.1f s (median of %d).", alone.canary, alone.canaries)
				}
				p("\n\n| workload | controller | APF | kube-apiserver CPU (s) | etcd CPU (s) | requests | writes | kube-apiserver CPU per write (ms) | canary scale-up (s) |\n")
				p("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
				head = true
			}
			perWrite, canary := "—", "—"
			if a.server.Writes > 0 {
				perWrite = fmt.Sprintf("%.2f", a.server.APIServerCPU*1000/a.server.Writes)
			}
			if a.canaries > 0 {
				canary = fmt.Sprintf("%.1f", a.canary)
				if hasAlone && alone.canary > 0 {
					canary += fmt.Sprintf(" (%.1fx alone)", a.canary/alone.canary)
				}
			}
			p("| %s | %s | %s | %.1f | %.1f | %.0f | %.0f | %s | %s |\n", w.Name, ctrl, a.apf, a.server.APIServerCPU, a.server.EtcdCPU, a.server.Requests, a.server.Writes, perWrite, canary)
		}
	}
	if head {
		p("\n")
	}
}

// holdBound writes a finalizer hold bound (finalizerHoldBound): — where
// not measured (the built-in controller removes a pod's finalizer before
// it counts it done), and "> b" past the histogram's highest bucket b.
func holdBound(bound float64) string {
	switch {
	case bound == 0:
		return "—"
	case bound < 0:
		return "> " + strconv.FormatFloat(-bound, 'g', -1, 64)
	}
	return strconv.FormatFloat(bound, 'g', -1, 64)
}

// writeMixed reports the workloads with late jobs: the late jobs' p50 and
// p99 from their own create to their terminal condition, and the first
// job's time, against their targets.
func writeMixed(p printer, ws []workload, rs []result) {
	head := false
	for _, w := range ws {
		if w.Late == nil {
			continue
		}
		up, hasUp := aggregate(rs, w.Name, upstream)
		us, hasUs := aggregate(rs, w.Name, ours)
		if !hasUp || !hasUs {
			continue
		}
		if !head {
			p("\n## Mixed workloads (late jobs behind a big one)\n\n")
			p("The late jobs are created %s after the big job; each late job's time is from its own create to its terminal condition.\n\n", w.LateAfter)
			p("| workload | late jobs p50 (s) built-in / operator | late jobs p99 (s) built-in / operator | p99 ratio | big job (s) built-in / operator | big job ratio |\n")
			p("| --- | --- | --- | --- | --- | --- |\n")
			head = true
		}
		p("| %s | %.1f / %.1f | %.1f / %.1f | %s | %.1f / %.1f | %s |\n", w.Name, up.p50, us.p50, up.p99, us.p99,
			met(us.p99/up.p99, w.Targets.JobP99), up.first, us.first, met(us.first/up.first, w.Targets.First))
	}
}
