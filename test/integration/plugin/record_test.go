package plugin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// nodeLost names the job's Ignore rule on DisruptionTarget.
const nodeLost = "node_lost"

// TestFailureRecordOutlivesThePods is a job of 1100 indexes that failed,
// every pod of it gone, with only its failure record left: the ConfigMaps
// the operator writes (shards 0 and 1, controlled by the job, one line of
// shard 1 edited into nonsense). Index 1 failed twice (node-a, then
// node-bad), 2 once by the "bad_input" rule (node-bad), 513 was OOM-killed
// on node-bad then failed by the unnamed rule 0 on node-c; 7 was evicted
// from node-bad (the "node_lost" Ignore rule, which counts against no
// node) and then succeeded. The job avoids a node where 2 indexes failed,
// which node-bad is. A ConfigMap with the record's label that the job does
// not control, naming evil-node, is left out by every command.
func TestFailureRecordOutlivesThePods(t *testing.T) {
	ns := namespace(t, "record")
	spec := harness.MakeIndexedBatchJob("train", ns).Completions(1100).Parallelism(10).BackoffLimitPerIndex(1).
		PodFailurePolicy(
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
			harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue),
		).EditRules(func(rules []ibjv1.PodFailurePolicyRule) {
		rules[1].Name, rules[2].Name = "bad_input", nodeLost
	}).Obj()
	spec.Spec.NodeAvoidance = &ibjv1.NodeAvoidance{Mode: ibjv1.NodeAvoidancePreferred, FailedIndexesPerNode: ptr.To[int32](2)}
	job := createJob(t, spec, ibjv1.IndexedBatchJobStatus{
		Phase: ibjv1.PhaseFailed, StartTime: ptr.To(at(20 * minute)), Succeeded: 1097, Failed: 6,
		CompletedIndexes: "0,3-512,514-1099", FailedIndexes: ptr.To("1,2,513"),
		Conditions: []metav1.Condition{
			condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonFailedIndexes, "Job has failed indexes", 5*minute),
			condition(ibjv1.ConditionFailed, ibjv1.ReasonFailedIndexes, "Job has failed indexes", 5*minute),
		},
	})

	exit := func(ix, attempt int32, node string, ago time.Duration, code int32) failrecord.Attempt {
		return failrecord.Attempt{Index: ix, Attempt: attempt, Time: now.Add(-ago), Node: node, Container: "main",
			ExitCode: code, HasExit: true, Reason: "Error", Action: failrecord.ActionCount}
	}
	byRule := func(a failrecord.Attempt, rule string, action failrecord.Action) failrecord.Attempt {
		a.Rule, a.Action = rule, action
		return a
	}
	oomKilled := exit(513, 0, "node-bad", 15*minute, 137)
	oomKilled.Reason = "OOMKilled"
	evicted := failrecord.Attempt{Index: 7, Time: now.Add(-14 * minute), Node: "node-bad", Reason: failrecord.ReasonDisruption,
		Rule: nodeLost, Action: failrecord.ActionIgnore}
	rec := failrecord.New()
	for _, a := range []failrecord.Attempt{
		exit(1, 0, "node-a", 18*minute, 1),
		exit(1, 1, "node-bad", 12*minute, 1),
		byRule(exit(2, 0, "node-bad", 16*minute, 3), "bad_input", failrecord.ActionFailIndex),
		evicted,
		oomKilled,
		byRule(exit(513, 1, "node-c", 6*minute, 42), "#0", failrecord.ActionFailIndex),
	} {
		rec.Add(a)
	}
	createRecordShard(t, job, 0, string(rec.EncodeShard(0)), true)
	createRecordShard(t, job, 1, string(rec.EncodeShard(1))+"513\tnot a number\n", true)
	evil := failrecord.New()
	evil.Add(exit(1050, 0, "evil-node", time.Minute, 1))
	evil.Add(byRule(exit(1051, 0, "evil-node", time.Minute, 3), "bad_input", failrecord.ActionFailIndex))
	createRecordShard(t, job, 2, string(evil.EncodeShard(2)), false)

	checkGolden(t, ns, "record", []string{
		"describe = describe train",
		"indexes = indexes train",
		"indexes-failed = indexes train --failed --chunk-size 1",
		"indexes-json = indexes train --index 7,513 -o json",
		"nodes = nodes train",
	})

	// What the golden files hold, stated: each failed index's node, exit
	// code and rule, and nothing of the ConfigMap the job does not control.
	want := map[string][]string{
		"describe train": {
			`1      node-bad  exit code 1 of main`,
			`2      node-bad  exit code 3 of main  rule "bad_input": FailIndex`,
			`513    node-c    exit code 42 of main  rule 0: FailIndex`,
		},
		"indexes train --failed": {
			"exit code 1 of main on node-bad;",
			`exit code 3 of main on node-bad; rule "bad_input": FailIndex;`,
			"exit code 42 of main on node-c; rule 0: FailIndex;",
		},
		"nodes train": {
			"node-bad   3          1,2,513",
			"every pod, since 2026-06-01T11:45:00Z (15m ago)",
			"index 513: exit code 42 of main; rule 0: FailIndex; 6m ago",
		},
	}
	for command, lines := range want {
		out := kubectlIBJ(t, ns, strings.Fields(command)...)
		// The columns' padding aside.
		flat := strings.Join(strings.Fields(out), " ")
		for _, l := range lines {
			if !strings.Contains(flat, strings.Join(strings.Fields(l), " ")) {
				t.Errorf("kubectl ibj %s does not show %q:\n%s", command, l, out)
			}
		}
		if strings.Contains(out, "evil-node") || strings.Contains(out, "1050") {
			t.Errorf("kubectl ibj %s shows the ConfigMap the job does not control:\n%s", command, out)
		}
	}
}

// createRecordShard writes shard n of the job's failure record as the
// operator does: named <job>-failures-<n>, labelled with the job's UID,
// and, when controlled, with the job as its controller.
func createRecordShard(t *testing.T, job *ibjv1.IndexedBatchJob, n int, data string, controlled bool) {
	t.Helper()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("%s-failures-%d", job.Name, n), Namespace: job.Namespace,
			Labels: map[string]string{ibjv1.FailureRecordLabel: string(job.UID)},
		},
		Data: map[string]string{failrecord.DataKey: data},
	}
	if controlled {
		cm.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(job, ibjv1.GroupVersion.WithKind("IndexedBatchJob"))}
	}
	if err := k8sClient.Create(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}
