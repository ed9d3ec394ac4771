package kubectlibj

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/pager"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
)

// recordPage is the most ConfigMaps of a failure record one list request
// asks for. Each may hold up to failrecord.MaxShardBytes, so the pages
// held at once (the one being read, and the one or two the pager fetches
// meanwhile) stay a few MiB whatever --chunk-size says.
const recordPage = 4

// jobRecord is a job's failure record as the plugin read it: the attempts
// of the ConfigMaps the job controls, and what was left out.
type jobRecord struct {
	*failrecord.Record
	// shards is how many of the job's ConfigMaps were read.
	shards int
	// unreadable counts the lines of those ConfigMaps that could not be
	// read (a user's edit): they are left out.
	unreadable int
}

// readRecord reads the job's failure record from the API server.
func (c *common) readRecord(ctx context.Context, job *ibjv1.IndexedBatchJob) (*jobRecord, error) {
	configMaps := c.kube.CoreV1().ConfigMaps(job.Namespace)
	return readRecord(ctx, job, c.recordPageSize(), func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return configMaps.List(ctx, opts)
	})
}

// recordPageSize is recordPage, or --chunk-size when that is smaller.
func (c *common) recordPageSize() int64 {
	if c.chunkSize > 0 {
		return min(recordPage, c.chunkSize)
	}
	return recordPage
}

// readRecord lists the ConfigMaps labelled as the job's failure record
// (FailureRecordLabel set to its UID), pageSize at a time, and merges
// those the job controls into one record. Each page is let go once
// decoded, so what is held is the record, not its ConfigMaps.
func readRecord(ctx context.Context, job *ibjv1.IndexedBatchJob, pageSize int64, list pager.ListPageFunc) (*jobRecord, error) {
	rec := &jobRecord{Record: failrecord.New()}
	p := pager.New(list)
	p.PageSize = pageSize
	p.PageBufferSize = 1
	selector := labels.Set{ibjv1.FailureRecordLabel: string(job.UID)}.String()
	err := p.EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			rec.add(job, cm)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// add merges one ConfigMap into the record if it is one of the job's
// shards (failrecord.ShardOfConfigMap).
func (r *jobRecord) add(job *ibjv1.IndexedBatchJob, cm *corev1.ConfigMap) {
	shard, ok := failrecord.ShardOfConfigMap(job.Name, job.UID, cm)
	if !ok {
		return
	}
	attempts, bad := failrecord.DecodeShard(cm.Data[failrecord.DataKey])
	r.Merge(shard, cm.ResourceVersion, attempts)
	r.shards++
	r.unreadable += bad
}

// warn writes what was left out of the record, if anything.
func (r *jobRecord) warn(w io.Writer, job *ibjv1.IndexedBatchJob) {
	if r.unreadable > 0 {
		fmt.Fprintf(w, "Warning: %s of the failure record of job %s could not be read and left out\n",
			plural(r.unreadable, "line", "lines"), job.Name)
	}
}

// recordOrWarn reads the job's failure record for describe and indexes,
// which show the job without it when it cannot be read (a user who may
// list pods but not ConfigMaps): it says so and gives an empty record.
func (c *common) recordOrWarn(ctx context.Context, job *ibjv1.IndexedBatchJob) (*jobRecord, error) {
	rec, err := c.readRecord(ctx, job)
	return recordOrWarn(c.ErrOut, job, rec, err)
}

// recordOrWarn is the record read, with a warning of what was left out;
// or, when the user may not list ConfigMaps, an empty record and a warning
// that says so.
func recordOrWarn(errOut io.Writer, job *ibjv1.IndexedBatchJob, rec *jobRecord, err error) (*jobRecord, error) {
	switch {
	case err == nil:
		rec.warn(errOut, job)
		return rec, nil
	case apierrors.IsForbidden(err):
		fmt.Fprintf(errOut, "Warning: the failure record of job %s is not shown: %v\n", job.Name, err)
		return &jobRecord{Record: failrecord.New()}, nil
	}
	return nil, err
}

// recordedFailure is an attempt of the record as the reports state it.
func recordedFailure(a failrecord.Attempt) *RecordedFailure {
	f := &RecordedFailure{
		Attempt: a.Attempt, Time: metav1.NewTime(a.Time), Node: a.Node, Container: a.Container,
		Reason: a.Reason, Rule: a.Rule, Action: string(a.Action),
	}
	if a.HasExit {
		f.ExitCode = &a.ExitCode
	}
	return f
}

// failureText is how an attempt ended, in words: its exit code and
// container, with the container's reason when it says more than Error
// ("exit code 137 of main (OOMKilled)"); else the pod's reason (Evicted,
// DeadlineExceeded, a disruption).
func failureText(f *RecordedFailure) string {
	if f.ExitCode == nil {
		return cmp.Or(f.Reason, "failed")
	}
	s := fmt.Sprintf("exit code %d", *f.ExitCode)
	if f.Container != "" {
		s += " of " + f.Container
	}
	if f.Reason != "" && f.Reason != "Error" {
		s += " (" + f.Reason + ")"
	}
	return s
}

// ruleText names the podFailurePolicy rule that matched an attempt and its
// action, as the record has them: `rule "bad_input": FailIndex` for a named
// rule, `rule 2: FailIndex` for the third, unnamed; "" when none matched.
func ruleText(f *RecordedFailure) string {
	if f.Rule == "" {
		return ""
	}
	rule := strconv.Quote(f.Rule)
	if pos, ok := strings.CutPrefix(f.Rule, "#"); ok {
		rule = pos
	}
	return fmt.Sprintf("rule %s: %s", rule, f.Action)
}

// failureLine is an attempt in one line: how it ended, on which node
// (unless node is false), the rule, and how long ago.
func failureLine(f *RecordedFailure, node bool, now time.Time) string {
	parts := []string{failureText(f)}
	if node && f.Node != "" {
		parts[0] += " on " + f.Node
	}
	if r := ruleText(f); r != "" {
		parts = append(parts, r)
	}
	parts = append(parts, since(f.Time.Time, now)+" ago")
	return strings.Join(parts, "; ")
}
