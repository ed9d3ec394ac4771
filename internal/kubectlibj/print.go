package kubectlibj

import (
	"io"
	"slices"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// printTable prints a table as kubectl get does: upper-case headers,
// aligned columns, the columns of priority 1 only with -o wide.
func printTable(out io.Writer, table *metav1.Table, wide bool) error {
	return printers.NewTablePrinter(printers.PrintOptions{Wide: wide}).PrintObj(table, out)
}

// indexColumns are the columns of `kubectl ibj indexes`; those of priority
// 1 show with -o wide. The columns of restartColumns follow Attempts for the
// jobs that have them.
var indexColumns = []metav1.TableColumnDefinition{
	{Name: "Index", Type: "string", Description: "The completion index, or first-last for a run of indexes without pods in the same state."},
	{Name: "State", Type: "string", Description: "pending, running, retrying (in how long, when known), terminating, succeeded, failed or stopped."},
	{Name: "Attempts", Type: "integer", Description: "Pods the index has had."},
	{Name: "Retries-Left", Type: "integer", Description: "backoffLimitPerIndex less the index's counted failures."},
	{Name: "Exit-Code", Type: "integer", Description: "The exit code that ended the latest pod."},
	{Name: "Container", Type: "string", Description: "The container of that exit code."},
	{Name: "Reason", Type: "string", Description: "Why the latest pod failed, and the podFailurePolicy rule that matched it."},
	{Name: "Node", Type: "string", Description: "The latest pod's node."},
	{Name: "Duration", Type: "string", Description: "How long the latest pod ran (so far)."},
	{Name: "Pod", Type: "string", Priority: 1, Description: "The latest pod."},
	{Name: "Finished", Type: "string", Priority: 1, Description: "When the latest pod ended."},
	{Name: "Memory", Type: "string", Priority: 1, Description: "The latest pod's memory per container, raised after OOM kills (retryResources.onOOMKilled)."},
	{Name: "Message", Type: "string", Priority: 1, Description: "The podFailurePolicy match, or the pod's status message."},
}

// restartColumns are the columns only a job with a RestartJob rule
// (spec.maxRestarts) or a rule that retries in place shows, each after
// Attempts.
var restartColumns = struct{ generation, inPlace metav1.TableColumnDefinition }{
	generation: metav1.TableColumnDefinition{Name: "Generation", Type: "integer",
		Description: "The latest pod's restart-attempt label: the job's restarts (status.restarts) when it was created."},
	inPlace: metav1.TableColumnDefinition{Name: "In-Place", Type: "integer",
		Description: "Times the kubelet restarted the latest pod's containers in place (retry InPlace); each is a failure of the index."},
}

// recordColumns are the columns of the job's failure record, which a table
// shows when one of its rows has recorded failures, after Duration.
var recordColumns = []metav1.TableColumnDefinition{
	{Name: "Failures", Type: "integer", Description: "Failed attempts of the index that the job's failure record holds (the last 8 at most)."},
	{Name: "Last-Failure", Type: "string", Description: "The index's last recorded failure: how it ended, on which node, the podFailurePolicy rule that matched, how long ago. The record outlives the pods."},
}

// nodeColumns are the columns of `kubectl ibj nodes`.
var nodeColumns = []metav1.TableColumnDefinition{
	{Name: "Node", Type: "string", Description: "A node where the job's pods failed."},
	{Name: "Failures", Type: "integer", Description: "The recorded failures there that count against the node."},
	{Name: "Indexes", Type: "string", Description: "The indexes of those failures."},
	{Name: "Last", Type: "string", Description: "The last of them: its index, how it ended, the podFailurePolicy rule that matched, how long ago."},
	{Name: "Avoided", Type: "string", Description: "Which of the job's pods avoid the node (spec.nodeAvoidance)."},
}

// indexTable is the rows as a table, with the columns of restartColumns the
// job has, and those of recordColumns when a row has recorded failures.
func indexTable(job *ibjv1.IndexedBatchJob, rows []IndexStatus, now time.Time) *metav1.Table {
	generation, inPlace := job.Spec.MaxRestarts != nil, retriesInPlace(job.Spec.PodFailurePolicy)
	recorded := slices.ContainsFunc(rows, func(s IndexStatus) bool { return s.LastFailure != nil })
	cols := slices.Clone(indexColumns[:3]) // Index, State, Attempts
	if generation {
		cols = append(cols, restartColumns.generation)
	}
	if inPlace {
		cols = append(cols, restartColumns.inPlace)
	}
	cols = append(cols, indexColumns[3:9]...) // Retries-Left to Duration
	if recorded {
		cols = append(cols, recordColumns...)
	}
	t := &metav1.Table{ColumnDefinitions: append(cols, indexColumns[9:]...), Rows: make([]metav1.TableRow, 0, len(rows))}
	for i := range rows {
		s := &rows[i]
		cells := []any{indexText(s), stateText(s, now), orDash(s.Attempts)}
		if generation {
			cells = append(cells, orDash(s.Generation))
		}
		if inPlace {
			cells = append(cells, orDash(s.InPlaceRestarts))
		}
		cells = append(cells, orDash(s.RetriesLeft), orDash(s.ExitCode),
			dashIfEmpty(s.Container), dashIfEmpty(s.Reason), dashIfEmpty(s.Node), ranFor(s, now))
		if recorded {
			last := "-"
			if s.LastFailure != nil {
				last = failureLine(s.LastFailure, true, now)
			}
			cells = append(cells, orDash(s.RecordedFailures), last)
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: append(cells,
			dashIfEmpty(s.Pod), timeText(s.FinishTime), dashIfEmpty(s.Memory), dashIfEmpty(s.Message),
		)})
	}
	return t
}

// stateTable is the indexes of each state, worst state first.
func stateTable(byState map[string]indexset.Set) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: []metav1.TableColumnDefinition{
		{Name: "State", Type: "string"}, {Name: "Count", Type: "integer"}, {Name: "Indexes", Type: "string"},
	}}
	for _, state := range stateOrder {
		if ixs := byState[state]; ixs.Len() > 0 {
			t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{state, ixs.Len(), truncate(ixs.String(), 60)}})
		}
	}
	return t
}

// indexText is the row's index, or the first and last of its run.
func indexText(s *IndexStatus) string {
	if s.LastIndex == nil {
		return strconv.Itoa(int(s.Index))
	}
	return strconv.Itoa(int(s.Index)) + "-" + strconv.Itoa(int(*s.LastIndex))
}

// stateText is the state, with the time left for a retry that is due
// later.
func stateText(s *IndexStatus, now time.Time) string {
	if s.State == StateRetrying && s.RetryAt != nil && s.RetryAt.After(now) {
		return "retrying in " + duration.HumanDuration(s.RetryAt.Sub(now))
	}
	return s.State
}

// ranFor is how long the latest pod ran: to its end, or until now while it
// runs.
func ranFor(s *IndexStatus, now time.Time) string {
	if s.StartTime == nil {
		return "-"
	}
	end := now
	if s.FinishTime != nil {
		end = s.FinishTime.Time
	}
	if end.Before(s.StartTime.Time) {
		return "-"
	}
	return duration.HumanDuration(end.Sub(s.StartTime.Time))
}

func timeText(t *metav1.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

func orDash(p *int32) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(int(*p))
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// outputWide is kubectl's -o wide: the table with its wide columns.
const outputWide = "wide"

// truncate shortens s to at most n bytes, ending in "...".
//
//nolint:unparam // the width is each caller's choice, though all pass the same one.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// when is a time and how long before or after now it is.
func when(t time.Time, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	if t.After(now) {
		return t.UTC().Format(time.RFC3339) + " (in " + duration.HumanDuration(t.Sub(now)) + ")"
	}
	return t.UTC().Format(time.RFC3339) + " (" + duration.HumanDuration(now.Sub(t)) + " ago)"
}
