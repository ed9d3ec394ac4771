package main

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Names of workloads as the benchmark names them at their default sizes.
const (
	name10k = "10k/p500"
	nameBig = "100k/p1000"
)

// render runs a writer of results.md and returns what it wrote.
func render(write func(printer)) string {
	var b strings.Builder
	write(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	return b.String()
}

// tableRows are the lines of out that are rows of a table under its head
// line (the line after the separator, on).
func tableRows(out, head string) []string {
	var rows []string
	in := false
	for line := range strings.SplitSeq(out, "\n") {
		switch {
		case strings.HasPrefix(line, head):
			in = true
		case in && strings.HasPrefix(line, "| ---"):
		case in && strings.HasPrefix(line, "|"):
			rows = append(rows, line)
		case in:
			return rows
		}
	}
	return rows
}

// run is one OK run of a workload under a controller.
func run(wl, ctrl string, seconds, cpu, rss, pods float64) result {
	return result{Workload: wl, Controller: ctrl, Rep: 1, OK: true, Seconds: seconds, CPU: cpu, RSSMiB: rss, PodsPerSec: pods / seconds}
}

func TestWriteScalingPutsTheOperatorsCostPerPodBySize(t *testing.T) {
	ws := []workload{
		{Name: nameBig, Completions: 100000, Key: keyBig},
		{Name: quickWorkload, Completions: 1000, Key: key1k},
		{Name: name10k, Completions: 10000, Key: key10k},
		{Name: "fleet", Jobs: 1000, Completions: 10, Key: keyFleet},
	}
	rs := []result{
		run(quickWorkload, upstream, 10, 0.8, 90, 1000),
		run(quickWorkload, ours, 3, 0.8, 40, 1000),
		run(name10k, ours, 50, 7, 56, 10000),
		run(nameBig, upstream, 1000, 300, 950, 100000),
		run(nameBig, ours, 1000, 96, 220, 100000),
		run("fleet", ours, 60, 13, 89, 10000),
	}
	out := render(func(p printer) { writeScaling(p, ws, rs) })
	want := []string{
		"| 1,000 | 1k/p100 | 0.80 | 40.0 | 0.80 | 90.0 |",
		"| 10,000 | 10k/p500 | 0.70 | 5.6 | — | — |",
		"| 100,000 | 100k/p1000 | 0.96 | 2.2 | 3.00 | 9.5 |",
	}
	if diff := cmp.Diff(want, tableRows(out, "| indexes |")); diff != "" {
		t.Errorf("scaling rows (-want +got):\n%s\nin:\n%s", diff, out)
	}
	if line := "cost per pod on 100,000 indexes over its cost on 1,000: CPU 1.20x (≤ 1.20) met, peak RSS per 1,000 pods 0.06x (≤ 1.20) met."; !strings.Contains(out, line) {
		t.Errorf("no %q in:\n%s", line, out)
	}
}

func TestWriteScalingWithOneSizeSaysItNeedsTwo(t *testing.T) {
	ws := []workload{{Name: quickWorkload, Completions: 1000, Key: key1k}}
	out := render(func(p printer) { writeScaling(p, ws, []result{run(quickWorkload, ours, 3, 0.9, 40, 1000)}) })
	if !strings.Contains(out, "needs two sizes in this run") {
		t.Errorf("no word of the missing sizes in:\n%s", out)
	}
	if got := render(func(p printer) { writeScaling(p, ws, nil) }); got != "" {
		t.Errorf("wrote %q with no run", got)
	}
}

func TestWriteIssueTargetsMarksEachCell(t *testing.T) {
	ws := []workload{
		{Name: name10k, Completions: 10000, Key: key10k},
		{Name: "fleet 1,000 jobs x 10/p10", Jobs: 1000, Completions: 10, Key: keyFleet},
		{Name: "mixed sizes 500 jobs x 1-200", Sizes: []int32{1, 200}, Key: keyMixedSizes},
		{Name: nameBig, Completions: 100000, Key: keyBig},
	}
	withIssueTargets(ws)
	fleet := func(ctrl string, seconds, p50, p99 float64) result {
		r := run("fleet 1,000 jobs x 10/p10", ctrl, seconds, 10, 100, 10000)
		r.JobP50, r.JobP99 = p50, p99
		return r
	}
	mixed := func(ctrl string, cpu, p50, p99 float64) result {
		r := run("mixed sizes 500 jobs x 1-200", ctrl, 100, cpu, 100, 14000)
		r.SmallP50, r.SmallP99 = p50, p99
		return r
	}
	rs := []result{
		run(name10k, upstream, 100, 17, 177, 10000),
		run(name10k, ours, 48, 7.2, 56, 10000),
		fleet(upstream, 120, 90, 118), fleet(ours, 60, 30, 60),
		mixed(upstream, 20, 40, 100), mixed(ours, 15, 10, 60),
	}
	out := render(func(p printer) { writeIssueTargets(p, ws, rs) })
	want := []string{
		"| fleet 1,000 jobs × 10 | fleet 1,000 jobs x 10/p10 | time to terminal | 120.0 s | 60.0 s | 0.50x (≤ 0.50) met |",
		"| fleet 1,000 jobs × 10 | fleet 1,000 jobs x 10/p10 | job p50 | 90.0 s | 30.0 s | 0.33x (≤ 0.35) met |",
		"| fleet 1,000 jobs × 10 | fleet 1,000 jobs x 10/p10 | job p99 | 118.0 s | 60.0 s | 0.51x (≤ 0.50) **not met** |",
		"| fleet with failures | — | job p50 | — | — | not measured in this run (≤ 0.40) |",
		"| mixed workload's small jobs | mixed sizes 500 jobs x 1-200 | small jobs p50 | 40.0 s | 10.0 s | 0.25x (≤ 0.30) met |",
		"| mixed workload's small jobs | mixed sizes 500 jobs x 1-200 | small jobs p99 | 100.0 s | 60.0 s | 0.60x (≤ 0.50) **not met** |",
		"| mixed workload's small jobs | mixed sizes 500 jobs x 1-200 | CPU | 20.0 s | 15.0 s | 0.75x (≤ 0.70) **not met** |",
		"| varied fleet at QPS 50, client-bound | — | time to terminal | — | — | not measured in this run (≤ 0.55) |",
		"| varied fleet at QPS 50, client-bound | — | job p99 | — | — | not measured in this run (≤ 0.50) |",
		"| varied fleet at QPS 50, client-bound | — | smallest 100 jobs p50 | — | — | not measured in this run (≤ 0.30) |",
		"| 10,000 indexes | 10k/p500 | CPU | 17.0 s | 7.2 s | 0.42x (≤ 0.40) **not met** |",
		"| 100,000 indexes | 100k/p1000 | time to terminal | — | — | not measured in this run (≤ 0.55) |",
		"| 100,000 indexes | 100k/p1000 | CPU | — | — | not measured in this run (≤ 0.35) |",
		"| 100,000 indexes | 100k/p1000 | peak RSS | — | — | not measured in this run (≤ 0.25) |",
	}
	if diff := cmp.Diff(want, tableRows(out, "| target |")); diff != "" {
		t.Errorf("issue targets (-want +got):\n%s\nin:\n%s", diff, out)
	}
	if line := "3 met, 4 not met, 7 not measured."; !strings.Contains(out, line) {
		t.Errorf("no %q in:\n%s", line, out)
	}
}

func TestWriteIssueTargetsOfAQuickRunSaysWhatItDidNotRun(t *testing.T) {
	ws := []workload{{Name: quickWorkload, Completions: 1000, Key: key1k}}
	rs := []result{run(quickWorkload, upstream, 10, 1, 90, 1000), run(quickWorkload, ours, 3, 1, 40, 1000)}
	rows := tableRows(render(func(p printer) { writeIssueTargets(p, ws, rs) }), "| target |")
	for _, want := range []string{
		"| fleet 1,000 jobs × 10 | — | time to terminal | — | — | not measured in this run (≤ 0.50) |",
		"| fleet with failures | — | job p50 | — | — | not measured in this run (≤ 0.40) |",
	} {
		if !slices.Contains(rows, want) {
			t.Errorf("no row %q in:\n%s", want, strings.Join(rows, "\n"))
		}
	}
}

func TestIssueTargetsTightenTheWorkloadsOwn(t *testing.T) {
	ws := []workload{
		{Name: name10k, Key: key10k, Targets: usual(targets{Time: 0.6})},
		{Name: nameBig, Key: keyBig, Targets: usual(targets{})},
		{Name: "2k/p500 at QPS 20/burst 30", Targets: usual(targets{Time: 0.6})},
	}
	withIssueTargets(ws)
	want := []targets{
		{Time: 0.6, CPU: 0.4, RSS: 0.35, Requests: 1, Finalizers: 1.05},
		{Time: 0.55, CPU: 0.35, RSS: 0.25, Requests: 1, Finalizers: 1.05},
		{Time: 0.6, CPU: 0.5, RSS: 0.35, Requests: 1, Finalizers: 1.05},
	}
	for i, w := range ws {
		if diff := cmp.Diff(want[i], w.Targets); diff != "" {
			t.Errorf("%s targets (-want +got):\n%s", w.Name, diff)
		}
	}
}

func TestWriteFleetsReportsOrderAndSmallJobsOfFleetsOnly(t *testing.T) {
	ws := []workload{
		{Name: quickWorkload, Completions: 1000},
		{Name: "fleet 100 jobs x 10/p10", Jobs: 100, Completions: 10, Key: keyFleet},
		{Name: "mixed sizes 3 jobs x 1-20", Sizes: []int32{1, 20, 4}, Key: keyMixedSizes},
	}
	sized := func(ctrl string, tau, inOrder, p50, p99 float64) result {
		r := run("mixed sizes 3 jobs x 1-20", ctrl, 20, 1, 50, 25)
		r.JobP50, r.JobP99, r.SmallP50, r.SmallP99 = p50, p99+1, p50, p99
		r.OrderTau, r.InOrder, r.Ordered, r.SmallJobs = tau, inOrder, true, 2
		return r
	}
	rs := []result{
		run(quickWorkload, ours, 3, 1, 40, 1000),
		run("fleet 100 jobs x 10/p10", ours, 12, 1, 40, 1000),
		sized(upstream, 0.33, 0.67, 9, 12), sized(ours, 1, 1, 3, 4),
	}
	out := render(func(p printer) { writeFleets(p, ws, rs) })
	want := []string{
		"| fleet 100 jobs x 10/p10 | indexed-batch-job | 100 | 12.0 | 0.0 / 0.0 | — | — | — |",
		"| mixed sizes 3 jobs x 1-20 | built-in Job (kcm) | 3 | 20.0 | 9.0 / 13.0 | 9.0 / 12.0 | 0.33 | 0.67 |",
		"| mixed sizes 3 jobs x 1-20 | indexed-batch-job | 3 | 20.0 | 3.0 / 5.0 | 3.0 / 4.0 | 1.00 | 1.00 |",
	}
	if diff := cmp.Diff(want, tableRows(out, "| workload |")); diff != "" {
		t.Errorf("fleet rows (-want +got):\n%s\nin:\n%s", diff, out)
	}
	if part := "3 jobs of 1 to"; !strings.Contains(out, part) {
		t.Errorf("no %q (the sizes) in:\n%s", part, out)
	}
}

func TestCommasGroupThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 13984: "13,984", 100000: "100,000", 1234567: "1,234,567", -1500: "-1,500", -150: "-150"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
}

// The section of the API server puts each controller's server cost per
// write and its canary beside the canary's time alone; a workload measured
// before the server was is left out.
func TestWriteServerPutsTheServersCostAndTheCanaryBesideItsTimeAlone(t *testing.T) {
	const fleet = "fleet 1,000 jobs x 10/p10"
	ws := []workload{{Name: quickWorkload, Completions: 1000}, {Name: fleet, Jobs: 1000, Completions: 10}}
	measured := func(ctrl string, cpu, writes, canary float64) result {
		r := run(fleet, ctrl, 60, 10, 60, 10000)
		r.APF, r.FlowSchema = true, true
		r.Server = serverLoad{APIServerCPU: cpu, EtcdCPU: cpu / 4, Requests: writes + 100, Writes: writes}
		r.CanarySeconds = canary
		return r
	}
	rs := []result{
		{Workload: canaryAloneWorkload, Controller: noController, OK: true, CanarySeconds: 2},
		run(quickWorkload, ours, 3, 1, 40, 1000),
		measured(upstream, 60, 30000, 9), measured(upstream, 80, 30000, 11),
		measured(ours, 40, 20000, 3),
	}
	out := render(func(p printer) { writeServer(p, ws, rs) })
	want := []string{
		"| fleet 1,000 jobs x 10/p10 | built-in Job (kcm) | shipped FlowSchema | 70.0 | 17.5 | 30100 | 30000 | 2.33 | 10.0 (5.0x alone) |",
		"| fleet 1,000 jobs x 10/p10 | indexed-batch-job | shipped FlowSchema | 40.0 | 10.0 | 20100 | 20000 | 2.00 | 3.0 (1.5x alone) |",
	}
	if diff := cmp.Diff(want, tableRows(out, "| workload |")); diff != "" {
		t.Errorf("server rows (-want +got):\n%s\nin:\n%s", diff, out)
	}
	if part := "Alone, with no controller under test running: 2.0 s (median of 1)."; !strings.Contains(out, part) {
		t.Errorf("no %q in:\n%s", part, out)
	}
	if got := render(func(p printer) { writeServer(p, ws, rs[1:2]) }); got != "" {
		t.Errorf("wrote %q with nothing of the server measured", got)
	}
}

// Every run's line has its canary and the server's CPU and requests; the
// canary alone is not a run of a controller.
func TestWriteRunsShowsEachRunsCanaryAndServer(t *testing.T) {
	r := run(quickWorkload, ours, 3, 1, 40, 1000)
	r.APF, r.CanarySeconds, r.Server = true, 4.25, serverLoad{APIServerCPU: 5.5, Requests: 2400}
	r.FinalizerHoldBound, r.FinalizerWaitBound = 330, 305
	late := run(quickWorkload, upstream, 10, 1, 90, 1000)
	late.CanaryError = "canary: 50 replicas not ready within 10m0s"
	rs := []result{{Workload: canaryAloneWorkload, Controller: noController, OK: true, CanarySeconds: 2}, late, r}
	out := render(func(p printer) { writeRuns(p, []workload{{Name: quickWorkload}}, rs) })
	want := []string{
		"| 1k/p100 | built-in Job (kcm) | exempt | 1 | 10.0 | 0.0 | 100 | 0.0 / 0.0 | 1.0 | 90 | — | 0 | 0 | 0 | — / — | not ready: canary: 50 replicas not ready within 10m0s | — | OK |",
		"| 1k/p100 | indexed-batch-job | default FlowSchemas | 1 | 3.0 | 0.0 | 333 | 0.0 / 0.0 | 1.0 | 40 | — | 0 | 0 | 0 | 330 / 305 | 4.2 | 5.5 / 2400 | OK |",
	}
	if diff := cmp.Diff(want, tableRows(out, "| workload | controller | APF |")); diff != "" {
		t.Errorf("run rows (-want +got):\n%s\nin:\n%s", diff, out)
	}
}
