package kubectlibj

import (
	"cmp"
	"fmt"
	"io"
	"strings"

	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
)

// describeFailures is how many failed indexes describe shows the last
// recorded failure of; `indexes --failed` lists them all.
const describeFailures = 10

// writeFailures writes what the job's failure record says: how many
// failures it holds, how the job avoids nodes, and the last recorded
// failure of each failed index (of the first describeFailures). Nothing
// for a job without recorded failures or nodeAvoidance.
func (d *description) writeFailures(w io.Writer) {
	job, rec := d.view.job, d.view.record
	recorded := rec != nil && rec.Len() > 0
	if recorded {
		fmt.Fprintf(w, "Failures:\t%s (kubectl ibj nodes %s)\n", recordSummary(rec), job.Name)
	}
	if recorded || job.Spec.NodeAvoidance != nil {
		line := avoidance(job)
		if t := failedIndexesPerNode(job); t > 0 && recorded {
			if avoided := rec.Avoided(t); len(avoided) > 0 {
				line += fmt.Sprintf("; avoided by every pod now: %s", truncate(strings.Join(avoided, ","), 60))
			}
		}
		fmt.Fprintf(w, "Node avoidance:\t%s\n", line)
	}
	var failed []IndexStatus
	more := 0
	for _, r := range d.summary.rows {
		if r.State != StateFailed || r.LastFailure == nil {
			continue
		}
		if len(failed) == describeFailures {
			more++
			continue
		}
		failed = append(failed, r)
	}
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(w, "Failed indexes, last recorded failure:\n  Index\tNode\tFailure\tRule\tTime\tFailures\n  -----\t----\t-------\t----\t----\t--------\n")
	for _, r := range failed {
		f := r.LastFailure
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%s\t%d\n", r.Index, dashIfEmpty(f.Node), failureText(f), dashIfEmpty(ruleText(f)),
			when(f.Time.Time, d.view.now), ptr.Deref(r.RecordedFailures, 0))
	}
	if more > 0 {
		fmt.Fprintf(w, "  ... and %d more: kubectl ibj indexes %s --failed\n", more, job.Name)
	}
}

// recordSummary counts what the record holds: its attempts, their indexes
// and the nodes they ran on.
func recordSummary(rec *failrecord.Record) string {
	indexes := rec.Indexes()
	nodes := map[string]bool{}
	for _, ix := range indexes {
		for _, a := range rec.Attempts(ix) {
			if a.Node != "" {
				nodes[a.Node] = true
			}
		}
	}
	return fmt.Sprintf("%s of %s recorded, on %s",
		plural(rec.Len(), "failed attempt", "failed attempts"), plural(len(indexes), "index", "indexes"),
		plural(len(nodes), "node", "nodes"))
}

// avoidance says how the job's pods avoid the nodes where its indexes
// failed (spec.nodeAvoidance).
func avoidance(job *ibjv1.IndexedBatchJob) string {
	na := job.Spec.NodeAvoidance
	if na == nil {
		return "unset (spec.nodeAvoidance): a retry may run where its index failed"
	}
	s := "Preferred (a scheduling preference)"
	if cmp.Or(na.Mode, ibjv1.NodeAvoidancePreferred) == ibjv1.NodeAvoidanceRequired {
		s = "Required (a constraint)"
	}
	s += ": an index's retries avoid the nodes where it failed"
	if t := failedIndexesPerNode(job); t > 0 {
		s += fmt.Sprintf("; every pod avoids a node where %s failed (failedIndexesPerNode)", plural(t, "index", "indexes"))
	}
	return s
}

// failedIndexesPerNode is the job's threshold of distinct failed indexes
// past which every pod avoids a node, 0 when it sets none.
func failedIndexesPerNode(job *ibjv1.IndexedBatchJob) int {
	if na := job.Spec.NodeAvoidance; na != nil && na.FailedIndexesPerNode != nil {
		return int(*na.FailedIndexesPerNode)
	}
	return 0
}
