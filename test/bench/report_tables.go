package main

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// figure is a median of a workload's runs under one controller that a
// target may bound, with its unit.
type figure struct {
	name, unit string
	of         func(agg) float64
	target     func(targets) float64
}

var figures = []figure{
	{"time to terminal", "s", func(a agg) float64 { return a.seconds }, func(t targets) float64 { return t.Time }},
	{"job p50", "s", func(a agg) float64 { return a.p50 }, func(t targets) float64 { return t.JobP50 }},
	{"job p99", "s", func(a agg) float64 { return a.p99 }, func(t targets) float64 { return t.JobP99 }},
	{"small jobs p50", "s", func(a agg) float64 { return a.smallP50 }, func(t targets) float64 { return t.SmallP50 }},
	{"small jobs p99", "s", func(a agg) float64 { return a.smallP99 }, func(t targets) float64 { return t.SmallP99 }},
	{"smallest 100 jobs p50", "s", func(a agg) float64 { return a.smallest100P50 }, func(t targets) float64 { return t.Smallest100P50 }},
	{"CPU", "s", func(a agg) float64 { return a.cpu }, func(t targets) float64 { return t.CPU }},
	{"peak RSS", "MiB", func(a agg) float64 { return a.rss }, func(t targets) float64 { return t.RSS }},
}

// byKey is the workload of ws with that key.
func byKey(ws []workload, key string) (workload, bool) {
	i := slices.IndexFunc(ws, func(w workload) bool { return key != "" && w.Key == key })
	if i < 0 {
		return workload{}, false
	}
	return ws[i], true
}

// writeIssueTargets writes issue #42's table of targets, one line per cell:
// the figure under each controller and the operator's over the built-in
// controller's against its target, or why it was not measured.
func writeIssueTargets(p printer, ws []workload, rs []result) {
	p("## Targets of issue #42 (operator / built-in, same run, equal QPS)\n\n")
	p("Each line is one cell of the issue's table: medians of this run's runs; \"small jobs\" are the mixed-size fleet's jobs of at most %d indexes.\n\n", smallJob)
	p("| target | workload | figure | built-in | operator | operator / built-in |\n| --- | --- | --- | ---: | ---: | --- |\n")
	var nMet, nMissed, nAbsent int
	for _, row := range issueTargets {
		w, hasW := byKey(ws, row.Key)
		up, hasUp := aggregate(rs, w.Name, upstream)
		us, hasUs := aggregate(rs, w.Name, ours)
		for _, f := range figures {
			t := f.target(row.Targets)
			if t == 0 {
				continue
			}
			name := cmp.Or(w.Name, "—")
			switch {
			case row.Key == "":
				nAbsent++
				p("| %s | — | %s | — | — | not measured: no workload of the benchmark measures it (≤ %.2f) |\n", row.Row, f.name, t)
			case !hasW || !hasUp || !hasUs || f.of(up) == 0:
				nAbsent++
				p("| %s | %s | %s | — | — | not measured in this run (≤ %.2f) |\n", row.Row, name, f.name, t)
			default:
				v := f.of(us) / f.of(up)
				if v <= t {
					nMet++
				} else {
					nMissed++
				}
				p("| %s | %s | %s | %s | %s | %s |\n", row.Row, w.Name, f.name, withUnit(f.of(up), f.unit), withUnit(f.of(us), f.unit), met(v, t))
			}
		}
	}
	p("\n%d met, %d not met, %d not measured.\n\n", nMet, nMissed, nAbsent)
}

func withUnit(v float64, unit string) string {
	if unit == "MiB" {
		return fmt.Sprintf("%.0f %s", v, unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

// writeFleets writes, for each workload of many jobs created together, each
// controller's job latencies, its small jobs' (the mixed-size fleet's), and
// how the order the jobs finished in followed the order they came in.
func writeFleets(p printer, ws []workload, rs []result) {
	head := false
	for _, w := range ws {
		if w.jobs() < 2 || w.Late != nil {
			continue
		}
		for _, ctrl := range []string{upstream, ours} {
			a, ok := aggregate(rs, w.Name, ctrl)
			if !ok {
				continue
			}
			if !head {
				writeFleetsHead(p, ws)
				head = true
			}
			small, tau, inOrder := "—", "—", "—"
			if w.Sizes != nil {
				small = fmt.Sprintf("%.1f / %.1f", a.smallP50, a.smallP99)
			}
			if a.ordered > 0 {
				tau, inOrder = fmt.Sprintf("%.2f", a.tau), fmt.Sprintf("%.2f", a.inOrder)
			}
			p("| %s | %s | %d | %.1f | %.1f / %.1f | %s | %s | %s |\n", w.Name, ctrl, w.jobs(), a.seconds, a.p50, a.p99, small, tau, inOrder)
		}
	}
	if head {
		p("\n")
	}
}

func writeFleetsHead(p printer, ws []workload) {
	p("## Fleets: do jobs finish in the order they came, do small jobs get through\n\n")
	p("Each job's latency is from its own create to its terminal condition. Finish order τ is Kendall's tau-b between the order the jobs' creates were sent in and the order the job watch saw them terminal (1: first come, first finished; 0: no relation); pairs in order is the fraction of pairs of jobs that finished in the order they came.")
	if w, ok := byKey(ws, keyMixedSizes); ok {
		small, pods := sizeSummary(w.Sizes)
		p(" The mixed-size fleet is %d jobs of 1 to %d indexes, each with every index at once (parallelism = completions), drawn with P(size = k) ∝ k^-%.1f from seed %d (`-mixed-sizes-jobs`, `-mixed-sizes-max`, `-mixed-sizes-seed`): %d of them small (at most %d indexes), the largest %d, %s pods in all; its small jobs' p50 / p99 are theirs alone.",
			w.jobs(), *sizesMax, sizeExponent, *sizesSeed, small, smallJob, largest(w.Sizes), commas(pods))
	}
	p("\n\n| workload | controller | jobs | time to terminal (s) | job p50 / p99 (s) | small jobs p50 / p99 (s) | finish order τ | pairs in order |\n")
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
}

// scalingGoal is the most the operator's cost per pod on the largest
// single job may be of its cost on the smallest.
const scalingGoal = 1.2

// perPod is a controller's CPU per pod (ms) and peak RSS per 1,000 pods
// (MiB) over a workload's runs.
func perPod(a agg) (cpuMs, rssPer1k float64) {
	if a.pods == 0 {
		return 0, 0
	}
	return a.cpu * 1000 / a.pods, a.rss * 1000 / a.pods
}

// writeScaling writes the operator's cost per pod on the single jobs of
// 1,000, 10,000 and the big workload's indexes (the built-in controller's
// beside it), and the largest's cost over the smallest's.
func writeScaling(p printer, ws []workload, rs []result) {
	var rows []workload
	for _, w := range ws {
		if _, ok := aggregate(rs, w.Name, ours); ok && (w.Key == key1k || w.Key == key10k || w.Key == keyBig) {
			rows = append(rows, w)
		}
	}
	if len(rows) == 0 {
		return
	}
	slices.SortFunc(rows, func(a, b workload) int { return cmp.Compare(a.Completions, b.Completions) })
	p("## Cost per pod by size\n\n")
	p("One job, every index succeeds, at the same client limits (medians): CPU per pod is the controller's CPU over the run's pods (succeeded + failed), peak RSS per 1,000 pods its peak RSS over the thousands of pods.\n\n")
	p("| indexes | workload | operator CPU per pod (ms) | operator peak RSS per 1,000 pods (MiB) | built-in CPU per pod (ms) | built-in peak RSS per 1,000 pods (MiB) |\n")
	p("| ---: | --- | ---: | ---: | ---: | ---: |\n")
	for _, w := range rows {
		us, _ := aggregate(rs, w.Name, ours)
		cpu, rss := perPod(us)
		upCPU, upRSS := "—", "—"
		if up, ok := aggregate(rs, w.Name, upstream); ok {
			c, r := perPod(up)
			upCPU, upRSS = fmt.Sprintf("%.2f", c), fmt.Sprintf("%.1f", r)
		}
		p("| %s | %s | %.2f | %.1f | %s | %s |\n", commas(int(w.Completions)), w.Name, cpu, rss, upCPU, upRSS)
	}
	if len(rows) < 2 {
		p("\nThe operator's cost per pod of the largest over the smallest: needs two sizes in this run.\n\n")
		return
	}
	lo, _ := aggregate(rs, rows[0].Name, ours)
	hi, _ := aggregate(rs, rows[len(rows)-1].Name, ours)
	loCPU, loRSS := perPod(lo)
	hiCPU, hiRSS := perPod(hi)
	p("\nThe operator's cost per pod on %s indexes over its cost on %s: CPU %s, peak RSS per 1,000 pods %s.\n\n",
		commas(int(rows[len(rows)-1].Completions)), commas(int(rows[0].Completions)), met(hiCPU/loCPU, scalingGoal), met(hiRSS/loRSS, scalingGoal))
}

// commas writes 13984 as 13,984.
func commas(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
