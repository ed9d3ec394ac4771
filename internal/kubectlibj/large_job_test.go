package kubectlibj

import (
	"bytes"
	"encoding/json"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// maxCompletions is the largest completions the API allows, as upstream's.
const maxCompletions = 2147483647

// ofIndex makes the pod one of the given index.
func ofIndex(ix int) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Name = "j-" + strconv.Itoa(ix) + "-0"
		p.Labels[ibjv1.CompletionIndexLabel] = strconv.Itoa(ix)
	}
}

// largeJobView is a job of the given completions early in its run, as the
// plugin sees it: indexes 0-2 and 4 succeeded (only 4's pod is left), 3
// failed for good (its pods gone), 5 runs, 6 waits to be retried after
// exit code 1, and the others have not started.
func largeJobView(completions int32) *jobView {
	job := testJob(perIndex(1), func(j *ibjv1.IndexedBatchJob) {
		j.Spec.Completions = completions
		j.Spec.Parallelism = ptr.To[int32](3)
		j.Spec.MaxFailedIndexes = ptr.To[int32](10)
		j.Status.CompletedIndexes = "0-2,4"
		j.Status.FailedIndexes = ptr.To("3")
		j.Status.Active = 1
		j.Status.Succeeded = 4
		j.Status.Failed = 3
	})
	scan := newPodScan(job)
	for _, p := range []*corev1.Pod{
		testPod(ofIndex(4), exited(0, 2*time.Minute)),
		testPod(ofIndex(5), phase(corev1.PodRunning), func(p *corev1.Pod) { p.Status.StartTime = ptr.To(ago(time.Minute)) }),
		testPod(ofIndex(6), exited(1, 4*time.Second)),
	} {
		scan.add(p)
	}
	return newJobView(job, scan, now, jobpod.DefaultBackoff)
}

// largeJobViewWithRecord is largeJobView with the job's failure record:
// index 3's two failures (its pods are gone) and 6's one.
func largeJobViewWithRecord(completions int32) *jobView {
	return largeJobView(completions).withRecord(recordOf(
		failed(3, 0, "node-a", 3*time.Minute),
		failed(3, 1, "node-b", 2*time.Minute),
		failed(6, 0, "node-a", 4*time.Second),
	))
}

// indexesOutput is what `kubectl ibj indexes j [--all] [-o format]` prints
// for the view.
func indexesOutput(t *testing.T, view *jobView, all bool, format string) string {
	t.Helper()
	var out bytes.Buffer
	o := &indexesOptions{
		common:       &common{IOStreams: genericiooptions.IOStreams{Out: &out, ErrOut: &out}},
		printFlags:   genericclioptions.NewPrintFlags("").WithTypeSetter(scheme),
		all:          all,
		outputFormat: format,
	}
	*o.printFlags.OutputFormat = format
	if err := o.print(view, view.wanted); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// describeOutput is what `kubectl ibj describe j` prints for the view,
// without events.
func describeOutput(view *jobView) string {
	var out bytes.Buffer
	w := tabwriter.NewWriter(&out, 0, 8, 2, ' ', 0)
	newDescription(view, nil).write(w)
	_ = w.Flush()
	return out.String()
}

// TestAJobOfTheLargestCompletionsIsShownByInterval: a job of completions
// 2147483647 with a few pods is a few rows: the indexes without pods are
// runs of one state, not one row (or one step of work) each.
func TestAJobOfTheLargestCompletionsIsShownByInterval(t *testing.T) {
	view := largeJobView(maxCompletions)

	var rows []string
	view.eachRow(view.wanted, func(s IndexStatus) { rows = append(rows, indexText(&s)+" "+s.State+" "+s.Reason) })
	wantRows := []string{
		"0-2 succeeded pods gone; from status.completedIndexes",
		"3 failed pods gone; from status.failedIndexes",
		"4 succeeded ",
		"5 running ",
		"6 retrying exit code 1",
		"7-2147483646 pending not started",
	}
	if diff := cmp.Diff(wantRows, rows); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	wantSummary := `Job j: 2147483647 indexes (0-2147483646); a summary, --all lists every index.

STATE       COUNT        INDEXES
failed      1            3
retrying    1            6
running     1            5
pending     2147483640   7-2147483646
succeeded   4            0-2,4

INDEX   STATE            ATTEMPTS   RETRIES-LEFT   EXIT-CODE   CONTAINER   REASON        NODE   DURATION
6       retrying in 6s   1          0              1           main        exit code 1   -      60s
5       running          1          1              -           -           -             -      60s
`
	if diff := cmp.Diff(wantSummary, indexesOutput(t, view, false, "")); diff != "" {
		t.Errorf("indexes (-want +got):\n%s", diff)
	}

	wantAll := `INDEX          STATE            ATTEMPTS   RETRIES-LEFT   EXIT-CODE   CONTAINER   REASON                                    NODE   DURATION
0-2            succeeded        -          -              -           -           pods gone; from status.completedIndexes   -      -
3              failed           -          -              -           -           pods gone; from status.failedIndexes      -      -
4              succeeded        1          1              0           main        -                                         -      60s
5              running          1          1              -           -           -                                         -      60s
6              retrying in 6s   1          0              1           main        exit code 1                               -      60s
7-2147483646   pending          -          -              -           -           not started                               -      -
`
	if diff := cmp.Diff(wantAll, indexesOutput(t, view, true, "")); diff != "" {
		t.Errorf("indexes --all (-want +got):\n%s", diff)
	}

	var report IndexReport
	if err := json.Unmarshal([]byte(indexesOutput(t, view, false, "json")), &report); err != nil {
		t.Fatal(err)
	}
	wantCounts := map[string]int32{StateSucceeded: 4, StateFailed: 1, StateRunning: 1, StateRetrying: 1, StatePending: 2147483640}
	if diff := cmp.Diff(wantCounts, report.Counts); diff != "" {
		t.Errorf("-o json counts (-want +got):\n%s", diff)
	}
	if n := len(report.Items); n != len(wantRows) {
		t.Errorf("-o json has %d items, want %d", n, len(wantRows))
	}
	if last := report.Items[len(report.Items)-1]; last.Index != 7 || ptr.Deref(last.LastIndex, 0) != 2147483646 {
		t.Errorf("-o json's last item is %d..%d, want 7..2147483646", last.Index, ptr.Deref(last.LastIndex, 0))
	}

	wantIndexes := `Indexes:      2147483647 (0-2147483646), 3 at a time
  failed:     1 (3)
  retrying:   1 (6)
  running:    1 (5)
  pending:    2147483640 (7-2147483646)
  succeeded:  4 (0-2,4)
`
	if got := describeOutput(view); !bytes.Contains([]byte(got), []byte(wantIndexes)) {
		t.Errorf("describe does not list the indexes by interval:\n%s\nwant it to contain:\n%s", got, wantIndexes)
	}
}

// TestThePluginsWorkDoesNotGrowWithCompletions: what the plugin allocates
// to show a job is the same for completions 1000 and 2147483647 with the
// same pods and failure record, for every command and output.
func TestThePluginsWorkDoesNotGrowWithCompletions(t *testing.T) {
	commands := map[string]func(*jobView) string{
		"indexes":         func(v *jobView) string { return indexesOutput(t, v, false, "") },
		"indexes --all":   func(v *jobView) string { return indexesOutput(t, v, true, "") },
		"indexes -o json": func(v *jobView) string { return indexesOutput(t, v, false, "json") },
		"describe":        describeOutput,
		"nodes":           func(v *jobView) string { return nodesOutput(t, v.job, v.record) },
	}
	views := map[string]func(int32) *jobView{"": largeJobView, " with a failure record": largeJobViewWithRecord}
	for name, command := range commands {
		for suffix, view := range views {
			if name == "nodes" && suffix == "" {
				continue
			}
			t.Run(name+suffix, func(t *testing.T) {
				small, large := allocated(view, command, 1000), allocated(view, command, maxCompletions)
				t.Logf("allocated %d bytes for completions 1000, %d for 2147483647", small, large)
				// A little more for the longer numbers and runtime noise; the
				// per-index work of a job of 2147483647 indexes would be
				// gigabytes.
				if limit := 2*small + 64<<10; large > limit {
					t.Errorf("completions 2147483647 allocated %d bytes, completions 1000 %d: more than %d", large, small, limit)
				}
			})
		}
	}
}

// allocated is the bytes allocated to build the view of a job of the
// given completions and run the command on it.
func allocated(view func(int32) *jobView, command func(*jobView) string, completions int32) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_ = command(view(completions))
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDescribeShowsTheGang: describe names the gang spec.scheduling (or
// gangScheduling) asks for, and the smaller gang of the indexes left while fewer are left; a
// finished job's gang is the one it asked for.
func TestDescribeShowsTheGang(t *testing.T) {
	gangJob := func(completed string, finished, scheduling bool) *jobView {
		job := testJob(perIndex(1), func(j *ibjv1.IndexedBatchJob) {
			j.Spec.Completions = 6
			j.Spec.Parallelism = ptr.To[int32](4)
			j.Spec.GangScheduling = &ibjv1.GangScheduling{}
			if scheduling {
				j.Spec.GangScheduling = nil
				j.Spec.Scheduling = &ibjv1.JobSchedulingConfiguration{SchedulingPolicy: &ibjv1.WorkloadPodGroupSchedulingPolicy{
					Gang: &ibjv1.WorkloadPodGroupGangSchedulingPolicy{MinCount: ptr.To[int32](3)},
				}}
			}
			j.UID = "0123456789ab"
			j.Status.CompletedIndexes = completed
			if finished {
				j.Status.Conditions = []metav1.Condition{{Type: ibjv1.ConditionComplete, Status: metav1.ConditionTrue, Reason: "CompletionsReached"}}
			}
		})
		return newJobView(job, newPodScan(job), now, jobpod.DefaultBackoff)
	}
	for _, tc := range []struct {
		name       string
		completed  string
		finished   bool
		scheduling bool
		want       string
	}{
		{"none finished", "", false, false, "Gang: 4 pods placed at once or none (gangScheduling; Workload and PodGroup j-01234567)"},
		{"two left", "0-3", false, false, "Gang: 4 pods placed at once or none, now 2 (the indexes left) (gangScheduling; Workload and PodGroup j-01234567)"},
		{"finished", "0-5", true, false, "Gang: 4 pods placed at once or none (gangScheduling; Workload and PodGroup j-01234567)"},
		{"spec.scheduling's gang", "", false, true, "Gang: 3 pods placed at once or none (scheduling.schedulingPolicy.gang; Workload and PodGroup j-01234567)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := describeOutput(gangJob(tc.completed, tc.finished, tc.scheduling))
			var line string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "Gang:") {
					line = strings.Join(strings.Fields(l), " ") // the columns' padding aside
				}
			}
			if line != tc.want {
				t.Errorf("gang line %q, want %q\n%s", line, tc.want, out)
			}
		})
	}
}

// TestDescribeStatesTheMemoryRaise: a job with retryResources.onOOMKilled
// says, among its retries, how memory grows after an OOM kill.
func TestDescribeStatesTheMemoryRaise(t *testing.T) {
	job := testJob(perIndex(1), func(j *ibjv1.IndexedBatchJob) {
		j.Spec.RetryResources = &ibjv1.RetryResources{OnOOMKilled: &ibjv1.OOMKilledResources{FactorPercent: 150, MaxMemory: resource.MustParse("2Gi")}}
	})
	out := describeOutput(newJobView(job, newPodScan(job), now, jobpod.DefaultBackoff))
	if want := "after an OOM kill, memory times 150% up to 2Gi (retryResources.onOOMKilled)"; !strings.Contains(out, want) {
		t.Errorf("describe does not say %q:\n%s", want, out)
	}
}

// TestRestartsAreShownOnlyForJobsThatRestart: the Generation and In-Place
// columns and describe's Restarts line appear for a job with maxRestarts
// or a rule that retries in place, and not for another job; describe
// says how a restart goes and which rules restart or retry in place.
func TestRestartsAreShownOnlyForJobsThatRestart(t *testing.T) {
	restarting := testJob(func(j *ibjv1.IndexedBatchJob) {
		j.Spec.Completions = 2
		j.Spec.Parallelism = ptr.To[int32](2)
		j.Spec.MaxRestarts = ptr.To[int32](2)
		restartAll := exitRule(ibjv1.PodFailurePolicyActionRestartJob, batchv1.PodFailurePolicyOnExitCodesOpIn, 3)
		restartAll.RestartIndexes = ibjv1.RestartAllIndexes
		inPlace := named("flaky", exitRule(batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyOnExitCodesOpIn, 75))
		inPlace.Retry = ibjv1.RetryInPlace
		j.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{restartAll, inPlace}}
		j.Status.Restarts = 1
		j.Status.Active = 1
	})
	plain := testJob(func(j *ibjv1.IndexedBatchJob) { j.Spec.Completions = 2 })
	pods := func(job *ibjv1.IndexedBatchJob) *podScan {
		scan := newPodScan(job)
		scan.add(testPod(generation(0), exited(3, time.Second)))
		scan.add(testPod(generation(0), phase(corev1.PodRunning), deleted(time.Second), func(p *corev1.Pod) {
			p.Name = "j-1-0"
			p.Labels[ibjv1.CompletionIndexLabel] = "1"
		}))
		return scan
	}
	for _, tc := range []struct {
		name      string
		job       *ibjv1.IndexedBatchJob
		want      []string
		wantNever []string
	}{
		{"a job that restarts", restarting, []string{
			"INDEX   STATE         ATTEMPTS   GENERATION   IN-PLACE   RETRIES-LEFT",
			"0       pending       1          0            0          -",
			"State: Restarting (restart 1 of at most 2): waiting for 1 pod of an earlier generation to stop",
			"Next: once they have stopped, the indexes the restart runs again start as generation 1",
			"Restarts: 1/2 (maxRestarts); live pods: 1 of generation 0",
			`rule 0 (RestartJob) restarts every index together; rule 1 "flaky" (Count) retries in place, after the kubelet's restart backoff`,
		}, nil},
		{"a job that does not", plain, []string{
			"INDEX   STATE         ATTEMPTS   RETRIES-LEFT",
		}, []string{"GENERATION", "IN-PLACE", "Restarts:", "Restarting"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			view := newJobView(tc.job, pods(tc.job), now, jobpod.DefaultBackoff)
			// The columns' padding aside.
			var lines []string
			for _, l := range strings.Split(indexesOutput(t, view, false, "")+describeOutput(view), "\n") {
				lines = append(lines, strings.Join(strings.Fields(l), " "))
			}
			out := strings.Join(lines, "\n")
			for _, w := range tc.want {
				if !strings.Contains(out, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("no %q in:\n%s", w, out)
				}
			}
			for _, w := range tc.wantNever {
				if strings.Contains(out, w) {
					t.Errorf("%q in the output of a job without restarts:\n%s", w, out)
				}
			}
		})
	}
}
