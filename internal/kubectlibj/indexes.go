package kubectlibj

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

const (
	// summaryAbove: a table of more indexes than this is summarised unless
	// --all, --failed, --running or --index asks for rows.
	summaryAbove = 50
	// summaryRows is how many rows of indexes that are not done a summary
	// lists, worst first.
	summaryRows = 20
)

const indexesExample = `  # Every index of job per-index, or a summary when it has many
  kubectl ibj indexes per-index

  # Only the indexes whose latest pod failed (failed for good, or retrying)
  kubectl ibj indexes per-index --failed

  # Indexes 3 and 5 to 7, with the pod names and failure messages
  kubectl ibj indexes per-index --index 3,5-7 -o wide

  # Every index, not a summary, or the same as JSON
  kubectl ibj indexes big --all
  kubectl ibj indexes big -o json`

// indexesOptions is `kubectl ibj indexes JOB`.
type indexesOptions struct {
	*common
	printFlags *genericclioptions.PrintFlags

	name             string
	failed, running  bool
	all              bool
	index            string
	outputFormat     string
	selectedByFilter bool
}

func newIndexesCommand(c *common) *cobra.Command {
	o := &indexesOptions{common: c, printFlags: genericclioptions.NewPrintFlags("").WithTypeSetter(scheme)}
	cmd := &cobra.Command{
		Use:   "indexes JOB [--failed|--running|--index LIST] [--all] [-o wide|json|yaml]",
		Short: "One row per index: state, attempts, retries left, exit code, why it failed, node, duration",
		Long: `Show every completion index of an IndexedBatchJob: its state (pending, running,
retrying in Ns, terminating, succeeded, failed, stopped), how many pods it had,
the retries it has left under backoffLimitPerIndex, the exit code and
container that ended its latest pod, why that pod failed (disruption,
deletion, the job's end such as DeadlineExceeded, the container's reason)
and which podFailurePolicy rule matched it, its node and how long it ran.
A job with maxRestarts also shows its pods' generation (restart-attempt), a
job with a rule that retries in place the restarts in place of its pods.
Indexes whose pods are gone are reported from the job's status. Where the
job's failure record (ConfigMaps the operator keeps) holds failures of an
index, FAILURES and LAST-FAILURE show how many and the last of them: how it
ended, its node, the rule that matched, when; they outlive the pods.

Indexes without pods that are in the same state for the same reason share
one row when there are three or more of them in a row ("5-2147483646
pending ... not started"; lastIndex in -o json), so the rows follow the
pods, not completions. The pods are listed a page at a time (--chunk-size)
by label, and only each index's latest pod is kept. Above 50 indexes the
table is a summary (the indexes in each state, then the indexes not done,
worst first) unless --all or a filter asks for rows; -o json and -o yaml
list them all.`,
		Example: indexesExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.complete(cmd, args); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.failed, "failed", false, "Only indexes whose latest pod failed: failed for good, or retrying.")
	cmd.Flags().BoolVar(&o.running, "running", false, "Only indexes with a pod that is running or starting.")
	cmd.Flags().StringVar(&o.index, "index", "", "Only these indexes, written as status.completedIndexes is (3,5-7).")
	cmd.Flags().BoolVar(&o.all, "all", false, "Rows for every index, however many (a run of indexes without pods in the same state is one row).")
	o.printFlags.AddFlags(cmd)
	cmd.Flag("output").Usage = "Output format. One of: (wide, json, yaml, jsonpath, go-template, …)."
	return cmd
}

func (o *indexesOptions) complete(_ *cobra.Command, args []string) error {
	o.name = args[0]
	o.outputFormat = *o.printFlags.OutputFormat
	if o.outputFormat == "name" {
		return fmt.Errorf("-o name: indexes have no names; use -o jsonpath='{.items[*].index}'")
	}
	o.selectedByFilter = o.failed || o.running || o.index != ""
	return o.common.complete()
}

func (o *indexesOptions) run(ctx context.Context) error {
	job, err := o.getJob(ctx, o.namespace, o.name)
	if err != nil {
		return err
	}
	selection := wantedIndexes(job)
	if o.index != "" {
		asked, err := indexset.Parse(o.index, job.Spec.Completions)
		if err != nil {
			return fmt.Errorf("--index: %w", err)
		}
		selection = selection.Intersect(asked)
	}
	scan, err := o.scanPods(ctx, job)
	if err != nil {
		return err
	}
	rec, err := o.recordOrWarn(ctx, job)
	if err != nil {
		return err
	}
	view := newJobView(job, scan, o.now(), o.backoff).withRecord(rec.Record)
	if scan.unindexed > 0 {
		fmt.Fprintf(o.ErrOut, "Warning: %d pods of job %s have no readable %s label and are left out\n", scan.unindexed, job.Name, ibjv1.CompletionIndexLabel)
	}
	return o.print(view, selection)
}

// print writes the selected indexes of the job: a summary, a table of rows,
// or the report in the format -o asks for.
func (o *indexesOptions) print(view *jobView, selection indexset.Set) error {
	job := view.job
	table := o.outputFormat == "" || o.outputFormat == outputWide
	if table && !o.all && !o.selectedByFilter && selection.Len() > summaryAbove {
		return o.printSummary(view, selection)
	}
	report := &IndexReport{
		TypeMeta: metav1.TypeMeta{APIVersion: ReportGroupVersion.String(), Kind: "IndexReport"},
		Job:      JobReference{Namespace: job.Namespace, Name: job.Name},
		Time:     metav1.Time{Time: view.now},
		Counts:   map[string]int32{},
		Items:    []IndexStatus{},
	}
	view.eachRow(selection, func(s IndexStatus) {
		if o.keep(&s) {
			report.Items = append(report.Items, s)
			report.Counts[s.State] += s.span()
		}
	})
	if table {
		if len(report.Items) == 0 {
			fmt.Fprintf(o.ErrOut, "No indexes of job %s match.\n", job.Name)
			return nil
		}
		return printTable(o.Out, indexTable(job, report.Items, view.now), o.outputFormat == outputWide)
	}
	printer, err := o.printFlags.ToPrinter()
	if err != nil {
		return err
	}
	return printer.PrintObj(report, o.Out)
}

// keep applies --failed and --running.
func (o *indexesOptions) keep(s *IndexStatus) bool {
	if !o.failed && !o.running {
		return true
	}
	failed := s.State == StateRetrying || s.State == StateFailed
	running := s.State == StateRunning || (s.State == StatePending && s.Pod != "")
	return (o.failed && failed) || (o.running && running)
}

// scanPods reads the job's pods, a page at a time, by their job-name and
// controller-uid labels (pods left by a deleted job of the same name have
// another UID).
func (c *common) scanPods(ctx context.Context, job *ibjv1.IndexedBatchJob) (*podScan, error) {
	scan := newPodScan(job)
	pods := c.kube.CoreV1().Pods(job.Namespace)
	p := c.newPager(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return pods.List(ctx, opts)
	})
	selector := labels.Set{ibjv1.JobNameLabel: job.Name, ibjv1.ControllerUIDLabel: string(job.UID)}.String()
	err := p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
		if pod, ok := obj.(*corev1.Pod); ok {
			scan.add(pod)
		}
		return nil
	})
	return scan, err
}

// stateOrder ranks states for a summary, worst first.
var stateOrder = []string{StateFailed, StateRetrying, StateTerminating, StateStopped, StateRunning, StatePending, StateSucceeded}

// summary is the indexes of a job grouped by state, with the rows of those
// not done that have a pod or recorded failures.
type summary struct {
	indexes map[string]indexset.Set
	rows    []IndexStatus
}

// summarize walks the rows of the selection once, keeping every state's
// indexes as intervals but only the rows a summary lists.
func summarize(view *jobView, selection indexset.Set) summary {
	byState := map[string][]indexset.Interval{}
	var rows []IndexStatus
	view.eachRow(selection, func(st IndexStatus) {
		byState[st.State] = appendIndex(byState[st.State], st.Index, st.span())
		if st.State != StateSucceeded && (st.Pod != "" || st.LastFailure != nil) {
			rows = append(rows, st)
		}
	})
	s := summary{indexes: make(map[string]indexset.Set, len(byState)), rows: rows}
	for state, ivs := range byState {
		s.indexes[state] = indexset.OfIntervals(ivs...)
	}
	slices.SortStableFunc(s.rows, func(a, b IndexStatus) int {
		return slices.Index(stateOrder, a.State) - slices.Index(stateOrder, b.State)
	})
	return s
}

func (o *indexesOptions) printSummary(view *jobView, selection indexset.Set) error {
	s := summarize(view, selection)
	job := view.job
	fmt.Fprintf(o.Out, "Job %s: %d indexes (%s); a summary, --all lists every index.\n\n", job.Name, selection.Len(), truncate(selection.String(), 60))
	if err := printTable(o.Out, stateTable(s.indexes), false); err != nil {
		return err
	}
	if len(s.rows) == 0 {
		return nil
	}
	fmt.Fprintln(o.Out)
	shown := s.rows[:min(len(s.rows), summaryRows)]
	if err := printTable(o.Out, indexTable(job, shown, view.now), o.outputFormat == outputWide); err != nil {
		return err
	}
	if more := len(s.rows) - len(shown); more > 0 {
		fmt.Fprintf(o.Out, "... and %d more not done; --failed, --running or --all lists them.\n", more)
	}
	return nil
}
