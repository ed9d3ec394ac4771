package kubectlibj

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

const nodesExample = `  # Which nodes failed the pods of job train, and whether the job avoids them
  kubectl ibj nodes train`

// nodesOptions is `kubectl ibj nodes JOB`.
type nodesOptions struct {
	*common
	name string
}

func newNodesCommand(c *common) *cobra.Command {
	o := &nodesOptions{common: c}
	return &cobra.Command{
		Use:   "nodes JOB",
		Short: "One row per node where the job's pods failed, and whether the job avoids it",
		Long: `Show, from the job's failure record, each node where its pods failed: how many
failures there count against the node, of which indexes, the last of them (its
exit code and container or reason, the podFailurePolicy rule that matched, how
long ago), and whether the job avoids the node (spec.nodeAvoidance): every later
pod once failedIndexesPerNode distinct indexes failed there, else the retries of
the indexes that failed there. The nodes with the most failures come first.

The operator keeps the record in ConfigMaps the job owns, so it outlives the
pods. A failure counts against no node when the pod never had one, when an
Ignore rule matched it, or when the pod had the DisruptionTarget condition (an
eviction, a preemption, a node drained or lost): the cluster ended it.`,
		Example: nodesExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.name = args[0]
			if err := o.complete(); err != nil {
				return err
			}
			return o.run(cmd.Context())
		},
	}
}

func (o *nodesOptions) run(ctx context.Context) error {
	job, err := o.getJob(ctx, o.namespace, o.name)
	if err != nil {
		return err
	}
	rec, err := o.readRecord(ctx, job)
	if err != nil {
		return err
	}
	rec.warn(o.ErrOut, job)
	return printNodes(o.Out, o.ErrOut, job, rec.Record, o.now())
}

// printNodes writes the nodes of the record, or says why there are none.
func printNodes(out, errOut io.Writer, job *ibjv1.IndexedBatchJob, rec *failrecord.Record, now time.Time) error {
	if rec.Len() == 0 {
		fmt.Fprintf(errOut, "No failures recorded for job %s.\n", job.Name)
		return nil
	}
	nodes := rec.Nodes(failedIndexesPerNode(job))
	blamed := 0
	for _, n := range nodes {
		blamed += n.Failures
	}
	fmt.Fprintf(out, "Job %s: %s.\nNode avoidance: %s.\n", job.Name, recordSummary(rec), avoidance(job))
	if len(nodes) > 0 {
		fmt.Fprintln(out)
		if err := printTable(out, nodeTable(job, nodes, now), false); err != nil {
			return err
		}
	}
	if rest := rec.Len() - blamed; rest > 0 {
		fmt.Fprintf(out, "%s against no node (no node, an Ignore rule, or a disruption).\n",
			plural(rest, "recorded failure counts", "recorded failures count"))
	}
	return nil
}

// nodeTable is the record's nodes as a table.
func nodeTable(job *ibjv1.IndexedBatchJob, nodes []failrecord.Node, now time.Time) *metav1.Table {
	t := &metav1.Table{ColumnDefinitions: nodeColumns, Rows: make([]metav1.TableRow, 0, len(nodes))}
	for _, n := range nodes {
		indexes := truncate(indexset.Of(n.Indexes...).String(), 60)
		last := "index " + strconv.Itoa(int(n.Last.Index)) + ": " + failureLine(recordedFailure(n.Last), false, now)
		t.Rows = append(t.Rows, metav1.TableRow{Cells: []any{n.Name, n.Failures, indexes, last, avoidedText(job, n, indexes, now)}})
	}
	return t
}

// avoidedText says which pods avoid the node: every pod once the job's
// failedIndexesPerNode is reached, else the retries of the indexes that
// failed there, or none without nodeAvoidance.
func avoidedText(job *ibjv1.IndexedBatchJob, n failrecord.Node, indexes string, now time.Time) string {
	switch {
	case job.Spec.NodeAvoidance == nil:
		return "no (nodeAvoidance unset)"
	case !n.AvoidedSince.IsZero():
		return "every pod, since " + when(n.AvoidedSince, now)
	}
	return "retries of " + indexes
}
