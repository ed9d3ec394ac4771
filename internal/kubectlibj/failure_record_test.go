package kubectlibj

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

const jobUID types.UID = "uid-j"

// failed is a failed attempt of index ix on node, d before now, with exit
// code 1 of container main unless options change it.
func failed(ix, att int32, node string, d time.Duration, opts ...func(*failrecord.Attempt)) failrecord.Attempt {
	a := failrecord.Attempt{Index: ix, Attempt: att, Time: now.Add(-d), Node: node, Container: "main",
		ExitCode: 1, HasExit: true, Reason: "Error", Action: failrecord.ActionCount}
	for _, o := range opts {
		o(&a)
	}
	return a
}

// byRule makes the attempt one a rule matched.
func byRule(rule string, action failrecord.Action) func(*failrecord.Attempt) {
	return func(a *failrecord.Attempt) { a.Rule, a.Action = rule, action }
}

// exitCode sets the attempt's exit code.
func exitCode(code int32) func(*failrecord.Attempt) {
	return func(a *failrecord.Attempt) { a.ExitCode = code }
}

// evicted makes the attempt a disruption without an exit code.
func evicted(a *failrecord.Attempt) {
	a.HasExit, a.ExitCode, a.Container, a.Reason = false, 0, "", failrecord.ReasonDisruption
}

func recordOf(attempts ...failrecord.Attempt) *failrecord.Record {
	r := failrecord.New()
	for _, a := range attempts {
		r.Add(a)
	}
	return r
}

// shardConfigMap is shard n of job j's record as the operator writes it,
// with the options' changes.
func shardConfigMap(name string, data string, opts ...func(*corev1.ConfigMap)) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", ResourceVersion: "1",
			Labels: map[string]string{ibjv1.FailureRecordLabel: string(jobUID)},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob",
				Name: "j", UID: jobUID, Controller: ptr.To(true)}},
		},
		Data: map[string]string{failrecord.DataKey: data},
	}
	for _, o := range opts {
		o(cm)
	}
	return cm
}

func encoded(attempts ...failrecord.Attempt) string {
	return string(recordOf(attempts...).EncodeShard(failrecord.ShardOf(attempts[0].Index)))
}

// pagedList serves the items pageSize at a time, as the API server does
// with limit and continue, and keeps the options of each request.
type pagedList struct {
	items    []corev1.ConfigMap
	requests []metav1.ListOptions
}

func (l *pagedList) list(_ context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	l.requests = append(l.requests, opts)
	start := 0
	if opts.Continue != "" {
		start, _ = strconv.Atoi(opts.Continue)
	}
	end := len(l.items)
	if opts.Limit > 0 {
		end = min(end, start+int(opts.Limit))
	}
	out := &corev1.ConfigMapList{Items: l.items[start:end]}
	if end < len(l.items) {
		out.Continue = strconv.Itoa(end)
	}
	return out, nil
}

// recordedIndex is what a test states of one index of a record read.
type recordedIndex struct {
	Attempts []int32
	Nodes    []string
}

func TestReadRecordMergesTheShardsTheJobControls(t *testing.T) {
	job := testJob(func(j *ibjv1.IndexedBatchJob) { j.UID = jobUID; j.Spec.Completions = 2000 })
	notControlled := func(cm *corev1.ConfigMap) { cm.OwnerReferences[0].Controller = nil }
	otherOwner := func(cm *corev1.ConfigMap) { cm.OwnerReferences[0].UID = "uid-other" }
	noOwner := func(cm *corev1.ConfigMap) { cm.OwnerReferences = nil }
	cases := []struct {
		name           string
		configMaps     []*corev1.ConfigMap
		wantIndexes    map[int32]recordedIndex
		wantShards     int
		wantUnreadable int
	}{{
		name: "two shards, read across pages",
		configMaps: []*corev1.ConfigMap{
			shardConfigMap("j-failures-0", encoded(failed(1, 0, "node-a", time.Minute), failed(1, 1, "node-b", 0))),
			shardConfigMap("j-failures-1", encoded(failed(600, 0, "node-a", 0))),
			shardConfigMap("j-failures-3", encoded(failed(1600, 2, "node-c", 0))),
		},
		wantIndexes: map[int32]recordedIndex{
			1:    {Attempts: []int32{0, 1}, Nodes: []string{"node-a", "node-b"}},
			600:  {Attempts: []int32{0}, Nodes: []string{"node-a"}},
			1600: {Attempts: []int32{2}, Nodes: []string{"node-c"}},
		},
		wantShards: 3,
	}, {
		name: "labelled but not controlled by the job: ignored",
		configMaps: []*corev1.ConfigMap{
			shardConfigMap("j-failures-0", encoded(failed(1, 0, "node-a", 0))),
			shardConfigMap("j-failures-1", encoded(failed(600, 0, "evil-1", 0)), noOwner),
			shardConfigMap("j-failures-2", encoded(failed(1100, 0, "evil-2", 0)), notControlled),
			shardConfigMap("j-failures-3", encoded(failed(1600, 0, "evil-3", 0)), otherOwner),
		},
		wantIndexes: map[int32]recordedIndex{1: {Attempts: []int32{0}, Nodes: []string{"node-a"}}},
		wantShards:  1,
	}, {
		name: "a name that is not <job>-failures-<n>: ignored",
		configMaps: []*corev1.ConfigMap{
			shardConfigMap("j-failures-01", encoded(failed(1, 0, "evil-1", 0))),
			shardConfigMap("j-failures-x", encoded(failed(1, 1, "evil-2", 0))),
			shardConfigMap("k-failures-0", encoded(failed(1, 2, "evil-3", 0))),
			shardConfigMap("j-failures--1", encoded(failed(1, 3, "evil-4", 0))),
		},
		wantIndexes: map[int32]recordedIndex{},
	}, {
		name: "an attempt of another shard's index, and lines that cannot be read, are left out",
		configMaps: []*corev1.ConfigMap{
			shardConfigMap("j-failures-0", encoded(failed(1, 0, "node-a", 0))+encoded(failed(700, 0, "node-x", 0))+
				"not a line\n1\t1\tyesterday\tnode-b\tmain\t1\tError\t-\tCount\n"),
		},
		wantIndexes:    map[int32]recordedIndex{1: {Attempts: []int32{0}, Nodes: []string{"node-a"}}},
		wantShards:     1,
		wantUnreadable: 2,
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &pagedList{}
			for _, cm := range tc.configMaps {
				l.items = append(l.items, *cm)
			}
			rec, err := readRecord(context.Background(), job, 2, l.list)
			if err != nil {
				t.Fatal(err)
			}
			got := map[int32]recordedIndex{}
			for _, ix := range rec.Indexes() {
				var r recordedIndex
				for _, a := range rec.Attempts(ix) {
					r.Attempts = append(r.Attempts, a.Attempt)
					r.Nodes = append(r.Nodes, a.Node)
				}
				got[ix] = r
			}
			if diff := cmp.Diff(tc.wantIndexes, got); diff != "" {
				t.Errorf("record (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([2]int{tc.wantShards, tc.wantUnreadable}, [2]int{rec.shards, rec.unreadable}); diff != "" {
				t.Errorf("[shards, unreadable lines] (-want +got):\n%s", diff)
			}
			wantRequests := max(1, (len(tc.configMaps)+1)/2)
			if len(l.requests) != wantRequests {
				t.Errorf("%d list requests, want %d (pages of 2)", len(l.requests), wantRequests)
			}
			for _, opts := range l.requests {
				if opts.Limit != 2 || opts.LabelSelector != ibjv1.FailureRecordLabel+"="+string(jobUID) {
					t.Errorf("listed with limit %d and selector %q, want 2 and %s=%s", opts.Limit, opts.LabelSelector, ibjv1.FailureRecordLabel, jobUID)
				}
			}
		})
	}
}

func TestTheRecordIsListedInSmallPages(t *testing.T) {
	for _, tc := range []struct {
		chunkSize, want int64
	}{{500, recordPage}, {0, recordPage}, {1, 1}} {
		t.Run(fmt.Sprintf("chunk size %d", tc.chunkSize), func(t *testing.T) {
			l := &pagedList{}
			c := &common{chunkSize: tc.chunkSize}
			if _, err := readRecord(context.Background(), testJob(), c.recordPageSize(), l.list); err != nil {
				t.Fatal(err)
			}
			if got := l.requests[0].Limit; got != tc.want {
				t.Errorf("limit %d, want %d", got, tc.want)
			}
		})
	}
}

func TestWarnsOfUnreadableLines(t *testing.T) {
	for _, tc := range []struct {
		unreadable int
		want       string
	}{
		{0, ""},
		{1, "Warning: 1 line of the failure record of job j could not be read and left out\n"},
		{3, "Warning: 3 lines of the failure record of job j could not be read and left out\n"},
	} {
		var out bytes.Buffer
		(&jobRecord{Record: failrecord.New(), unreadable: tc.unreadable}).warn(&out, testJob())
		if diff := cmp.Diff(tc.want, out.String()); diff != "" {
			t.Errorf("%d unreadable (-want +got):\n%s", tc.unreadable, diff)
		}
	}
}

// TestDescribeAndIndexesGoOnWithoutTheRecord: a user who may not list
// ConfigMaps still sees the job, with a warning; any other error stops
// the command.
func TestDescribeAndIndexesGoOnWithoutTheRecord(t *testing.T) {
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("no RBAC rule allows it"))
	cases := []struct {
		name       string
		err        error
		wantErr    bool
		wantRecord bool
		wantOut    string
	}{
		{"read", nil, false, true, ""},
		{"forbidden", forbidden, false, true,
			`Warning: the failure record of job j is not shown: configmaps is forbidden: no RBAC rule allows it` + "\n"},
		{"another error", errors.New("connection refused"), true, false, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			var read *jobRecord
			if tc.err == nil {
				read = &jobRecord{Record: recordOf(failed(0, 0, "node-a", 0))}
			}
			rec, err := recordOrWarn(&out, testJob(), read, tc.err)
			if (err != nil) != tc.wantErr || (rec != nil) != tc.wantRecord {
				t.Errorf("got record %v, error %v; want a record: %v, an error: %v", rec, err, tc.wantRecord, tc.wantErr)
			}
			if diff := cmp.Diff(tc.wantOut, out.String()); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFailureLine(t *testing.T) {
	cases := []struct {
		name    string
		attempt failrecord.Attempt
		want    string
	}{
		{"an exit code", failed(0, 0, "node-a", time.Minute), "exit code 1 of main on node-a; 60s ago"},
		{"a reason beyond Error", failed(0, 0, "node-a", time.Minute, exitCode(137), func(a *failrecord.Attempt) { a.Reason = "OOMKilled" }),
			"exit code 137 of main (OOMKilled) on node-a; 60s ago"},
		{"a named rule", failed(0, 0, "node-a", time.Hour, exitCode(3), byRule("bad_input", failrecord.ActionFailIndex)),
			`exit code 3 of main on node-a; rule "bad_input": FailIndex; 60m ago`},
		{"an unnamed rule", failed(0, 0, "node-a", 0, byRule("#2", failrecord.ActionIgnore)),
			"exit code 1 of main on node-a; rule 2: Ignore; 0s ago"},
		{"no exit code", failed(0, 0, "node-a", 0, evicted), "DisruptionTarget on node-a; 0s ago"},
		{"no node", failed(0, 0, "", 0, func(a *failrecord.Attempt) { a.HasExit, a.Reason = false, "DeadlineExceeded" }),
			"DeadlineExceeded; 0s ago"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, failureLine(recordedFailure(tc.attempt), true, now)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// recordedJob is a job of 8 indexes whose pods are all gone: 0 and 4-7
// succeeded, 1-3 failed for good; the record holds 1's two failures,
// 2's and 3's one each (3's an eviction), and 5's failure before it
// succeeded.
func recordedJob(opts ...func(*ibjv1.IndexedBatchJob)) (*ibjv1.IndexedBatchJob, *failrecord.Record) {
	job := testJob(append([]func(*ibjv1.IndexedBatchJob){perIndex(1), func(j *ibjv1.IndexedBatchJob) {
		j.Spec.Completions = 8
		j.Status.CompletedIndexes = "0,4-7"
		j.Status.FailedIndexes = ptr.To("1-3")
	}}, opts...)...)
	rec := recordOf(
		failed(1, 0, "node-a", 5*time.Minute),
		failed(1, 1, "node-b", 4*time.Minute),
		failed(2, 0, "node-a", 3*time.Minute, exitCode(3), byRule("bad_input", failrecord.ActionFailIndex)),
		failed(3, 0, "node-c", 2*time.Minute, evicted, byRule("#1", failrecord.ActionIgnore)),
		failed(5, 0, "node-a", time.Minute, exitCode(137), func(a *failrecord.Attempt) { a.Reason = "OOMKilled" }),
	)
	return job, rec
}

func TestIndexRowsShowTheRecordAfterThePodsAreGone(t *testing.T) {
	job, rec := recordedJob()
	view := newJobView(job, newPodScan(job), now, jobpod.DefaultBackoff).withRecord(rec)
	type row struct {
		Index            string
		State            string
		RecordedFailures *int32
		LastFailure      *RecordedFailure
	}
	at := func(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }
	want := []row{
		{Index: "0", State: StateSucceeded},
		{Index: "1", State: StateFailed, RecordedFailures: ptr.To[int32](2), LastFailure: &RecordedFailure{
			Attempt: 1, Time: at(4 * time.Minute), Node: "node-b", ExitCode: ptr.To[int32](1), Container: "main", Reason: "Error", Action: "Count"}},
		{Index: "2", State: StateFailed, RecordedFailures: ptr.To[int32](1), LastFailure: &RecordedFailure{
			Time: at(3 * time.Minute), Node: "node-a", ExitCode: ptr.To[int32](3), Container: "main", Reason: "Error", Rule: "bad_input", Action: "FailIndex"}},
		{Index: "3", State: StateFailed, RecordedFailures: ptr.To[int32](1), LastFailure: &RecordedFailure{
			Time: at(2 * time.Minute), Node: "node-c", Reason: failrecord.ReasonDisruption, Rule: "#1", Action: "Ignore"}},
		{Index: "4", State: StateSucceeded},
		{Index: "5", State: StateSucceeded, RecordedFailures: ptr.To[int32](1), LastFailure: &RecordedFailure{
			Time: at(time.Minute), Node: "node-a", ExitCode: ptr.To[int32](137), Container: "main", Reason: "OOMKilled", Action: "Count"}},
		{Index: "6", State: StateSucceeded},
		{Index: "7", State: StateSucceeded},
	}
	var got []row
	view.eachRow(view.wanted, func(s IndexStatus) {
		got = append(got, row{indexText(&s), s.State, s.RecordedFailures, s.LastFailure})
	})
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}

	wantTable := `INDEX   STATE       ATTEMPTS   RETRIES-LEFT   EXIT-CODE   CONTAINER   REASON                                    NODE   DURATION   FAILURES   LAST-FAILURE
0       succeeded   -          -              -           -           pods gone; from status.completedIndexes   -      -          -          -
1       failed      -          -              -           -           pods gone; from status.failedIndexes      -      -          2          exit code 1 of main on node-b; 4m ago
2       failed      -          -              -           -           pods gone; from status.failedIndexes      -      -          1          exit code 3 of main on node-a; rule "bad_input": FailIndex; 3m ago
3       failed      -          -              -           -           pods gone; from status.failedIndexes      -      -          1          DisruptionTarget on node-c; rule 1: Ignore; 2m ago
4       succeeded   -          -              -           -           pods gone; from status.completedIndexes   -      -          -          -
5       succeeded   -          -              -           -           pods gone; from status.completedIndexes   -      -          1          exit code 137 of main (OOMKilled) on node-a; 60s ago
6       succeeded   -          -              -           -           pods gone; from status.completedIndexes   -      -          -          -
7       succeeded   -          -              -           -           pods gone; from status.completedIndexes   -      -          -          -
`
	if diff := cmp.Diff(wantTable, indexesOutput(t, view, false, "")); diff != "" {
		t.Errorf("indexes (-want +got):\n%s", diff)
	}
}

// TestAnIndexWhosePodsWereDeletedWhileRetryingSaysSo: an index neither
// finished nor with a pod, but with recorded failures, did run: its pods
// are gone, and its next attempt is not created yet, or the job ended.
func TestAnIndexWhosePodsWereDeletedWhileRetryingSaysSo(t *testing.T) {
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want [2]string
	}{
		{"the job runs", testJob(perIndex(3)), [2]string{StatePending, "pods gone; next attempt not started"}},
		{"the job ended", testJob(perIndex(3), ended(ibjv1.ConditionFailed, ibjv1.ReasonDeadlineExceeded, 0)),
			[2]string{StateStopped, "pods gone; the job ended (DeadlineExceeded)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			view := newJobView(tc.job, newPodScan(tc.job), now, jobpod.DefaultBackoff).withRecord(recordOf(failed(0, 0, "node-a", time.Minute)))
			s := view.status(0)
			if diff := cmp.Diff(tc.want, [2]string{s.State, s.Reason}); diff != "" {
				t.Errorf("[state, reason] (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDescribeShowsTheLastRecordedFailureOfEachFailedIndex(t *testing.T) {
	manyFailed := func() (*ibjv1.IndexedBatchJob, *failrecord.Record) {
		job := testJob(perIndex(0), func(j *ibjv1.IndexedBatchJob) {
			j.Spec.Completions = 20
			j.Status.FailedIndexes = ptr.To("0-11")
			j.Spec.NodeAvoidance = &ibjv1.NodeAvoidance{Mode: ibjv1.NodeAvoidanceRequired, FailedIndexesPerNode: ptr.To[int32](3)}
		})
		rec := failrecord.New()
		for ix := range int32(12) {
			rec.Add(failed(ix, 0, "node-"+strconv.Itoa(int(ix%2)), time.Duration(12-ix)*time.Minute))
		}
		return job, rec
	}
	cases := []struct {
		name      string
		view      func() (*ibjv1.IndexedBatchJob, *failrecord.Record)
		want      string
		wantNever []string
	}{{
		name: "failed indexes whose pods are gone",
		view: func() (*ibjv1.IndexedBatchJob, *failrecord.Record) { return recordedJob() },
		want: `
Failures:        5 failed attempts of 4 indexes recorded, on 3 nodes (kubectl ibj nodes j)
Node avoidance:  unset (spec.nodeAvoidance): a retry may run where its index failed
Failed indexes, last recorded failure:
  Index  Node    Failure              Rule                         Time                           Failures
  -----  ----    -------              ----                         ----                           --------
  1      node-b  exit code 1 of main  -                            2026-06-01T11:56:00Z (4m ago)  2
  2      node-a  exit code 3 of main  rule "bad_input": FailIndex  2026-06-01T11:57:00Z (3m ago)  1
  3      node-c  DisruptionTarget     rule 1: Ignore               2026-06-01T11:58:00Z (2m ago)  1
`,
	}, {
		name: "more failed indexes than describe lists, and the nodes every pod avoids",
		view: manyFailed,
		want: `
Node avoidance:  Required (a constraint): an index's retries avoid the nodes where it failed; every pod avoids a node where 3 indexes failed (failedIndexesPerNode); avoided by every pod now: node-0,node-1
`,
	}, {
		name: "the last line of a long list",
		view: manyFailed,
		want: `
  9      node-1  exit code 1 of main  -     2026-06-01T11:57:00Z (3m ago)   1
  ... and 2 more: kubectl ibj indexes j --failed
`,
	}, {
		name:      "a job without a record says nothing of it",
		view:      func() (*ibjv1.IndexedBatchJob, *failrecord.Record) { return testJob(), failrecord.New() },
		wantNever: []string{"Failures:", "Node avoidance:", "Failed indexes"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job, rec := tc.view()
			out := describeOutput(newJobView(job, newPodScan(job), now, jobpod.DefaultBackoff).withRecord(rec))
			if !strings.Contains(out, tc.want) {
				t.Errorf("describe does not show\n%s\nin:\n%s", tc.want, out)
			}
			for _, w := range tc.wantNever {
				if strings.Contains(out, w) {
					t.Errorf("%q in the description of a job without a record:\n%s", w, out)
				}
			}
		})
	}
}
