package kubectlibj

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
)

// nodesOutput is what `kubectl ibj nodes j` prints, stdout then stderr.
func nodesOutput(t *testing.T, job *ibjv1.IndexedBatchJob, rec *failrecord.Record) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if err := printNodes(&out, &errOut, job, rec, now); err != nil {
		t.Fatal(err)
	}
	return out.String() + errOut.String()
}

func TestNodesShowWhereTheJobFailedAndWhatItAvoids(t *testing.T) {
	avoiding := func(mode ibjv1.NodeAvoidanceMode, threshold *int32) func(*ibjv1.IndexedBatchJob) {
		return func(j *ibjv1.IndexedBatchJob) {
			j.Spec.NodeAvoidance = &ibjv1.NodeAvoidance{Mode: mode, FailedIndexesPerNode: threshold}
		}
	}
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		rec  *failrecord.Record
		want string
	}{{
		name: "nodeAvoidance unset",
		job:  testJob(),
		rec:  func() *failrecord.Record { _, r := recordedJob(); return r }(),
		want: `Job j: 5 failed attempts of 4 indexes recorded, on 3 nodes.
Node avoidance: unset (spec.nodeAvoidance): a retry may run where its index failed.

NODE     FAILURES   INDEXES   LAST                                                  AVOIDED
node-a   3          1,2,5     index 5: exit code 137 of main (OOMKilled); 60s ago   no (nodeAvoidance unset)
node-b   1          1         index 1: exit code 1 of main; 4m ago                  no (nodeAvoidance unset)
1 recorded failure counts against no node (no node, an Ignore rule, or a disruption).
`,
	}, {
		name: "Preferred: the retries of the indexes that failed there",
		job:  testJob(avoiding(ibjv1.NodeAvoidancePreferred, nil)),
		rec:  func() *failrecord.Record { _, r := recordedJob(); return r }(),
		want: `Job j: 5 failed attempts of 4 indexes recorded, on 3 nodes.
Node avoidance: Preferred (a scheduling preference): an index's retries avoid the nodes where it failed.

NODE     FAILURES   INDEXES   LAST                                                  AVOIDED
node-a   3          1,2,5     index 5: exit code 137 of main (OOMKilled); 60s ago   retries of 1,2,5
node-b   1          1         index 1: exit code 1 of main; 4m ago                  retries of 1
1 recorded failure counts against no node (no node, an Ignore rule, or a disruption).
`,
	}, {
		name: "Required with failedIndexesPerNode: every pod, since the index that reached it failed",
		job:  testJob(avoiding(ibjv1.NodeAvoidanceRequired, ptr.To[int32](2))),
		rec: recordOf(
			failed(1, 0, "node-a", 5*time.Minute),
			failed(1, 1, "node-b", 4*time.Minute),
			failed(2, 0, "node-a", 3*time.Minute, exitCode(3), byRule("bad_input", failrecord.ActionFailIndex)),
		),
		want: `Job j: 3 failed attempts of 2 indexes recorded, on 2 nodes.
Node avoidance: Required (a constraint): an index's retries avoid the nodes where it failed; every pod avoids a node where 2 indexes failed (failedIndexesPerNode).

NODE     FAILURES   INDEXES   LAST                                                                AVOIDED
node-a   2          1,2       index 2: exit code 3 of main; rule "bad_input": FailIndex; 3m ago   every pod, since 2026-06-01T11:57:00Z (3m ago)
node-b   1          1         index 1: exit code 1 of main; 4m ago                                retries of 1
`,
	}, {
		name: "only failures that count against no node",
		job:  testJob(),
		rec:  recordOf(failed(0, 0, "node-a", time.Minute, evicted)),
		want: `Job j: 1 failed attempt of 1 index recorded, on 1 node.
Node avoidance: unset (spec.nodeAvoidance): a retry may run where its index failed.
1 recorded failure counts against no node (no node, an Ignore rule, or a disruption).
`,
	}, {
		name: "no record",
		job:  testJob(),
		rec:  failrecord.New(),
		want: "No failures recorded for job j.\n",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, nodesOutput(t, tc.job, tc.rec)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
		})
	}
}
