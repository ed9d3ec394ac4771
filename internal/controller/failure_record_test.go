package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// bind puts the pod on node, as the scheduler would.
func (c *cluster) bind(p *corev1.Pod, node string) {
	c.t.Helper()
	c.update(p, false, func(pod *corev1.Pod) { pod.Spec.NodeName = node })
	c.reload(p.Name)
}

// avoided reads the nodes the pod's required terms leave out: the
// metadata.name NotIn matches of its first term, one value each, as the
// API server allows.
func avoided(p *corev1.Pod) []string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var out []string
	for _, r := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchFields {
		if r.Key == "metadata.name" && r.Operator == corev1.NodeSelectorOpNotIn {
			if len(r.Values) != 1 {
				return append(out, fmt.Sprintf("a match of %d values", len(r.Values)))
			}
			out = append(out, r.Values[0])
		}
	}
	return out
}

// readRecord is the job's failure record as the API server holds it.
func (c *cluster) readRecord() *failrecord.Record {
	c.t.Helper()
	var list corev1.ConfigMapList
	if err := c.api.List(context.Background(), &list, client.MatchingLabels{ibjv1.FailureRecordLabel: string(c.job.UID)}); err != nil {
		c.t.Fatal(err)
	}
	rec := failrecord.New()
	for i := range list.Items {
		n, ok := recordShard(c.job, &list.Items[i])
		if !ok {
			c.t.Fatalf("ConfigMap %s is not a shard of the job's record", list.Items[i].Name)
		}
		attempts, bad := failrecord.DecodeShard(list.Items[i].Data[failrecord.DataKey])
		if bad > 0 {
			c.t.Fatalf("ConfigMap %s has %d lines the record cannot read", list.Items[i].Name, bad)
		}
		rec.Merge(n, list.Items[i].ResourceVersion, attempts)
	}
	return rec
}

// An index's retry avoids the node where it failed; a node where
// failedIndexesPerNode indexes failed is avoided by every later pod, from
// the NodeAvoided event on. The record says so after the pods are gone
// and the operator restarted.
func TestFailedNodesAreAvoidedAndRemembered(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).
		BackoffLimitPerIndex(3).NodeAvoidance(ibjv1.NodeAvoidanceRequired, 2).Obj())
	c.sync()
	c.bind(podOfIndex(c, 0), "bad")
	c.bind(podOfIndex(c, 1), "bad")
	c.bind(podOfIndex(c, 2), "good")
	c.fail(podOfIndex(c, 0), 3, false)
	c.sync()
	c.advance(11 * time.Second)
	p := c.sync()
	if got := avoided(podOfIndex(c, 0)); !slices.Equal(got, []string{"bad"}) {
		t.Fatalf("index 0's retry avoids %v, want [bad]", got)
	}
	if slices.ContainsFunc(p.events, func(e event) bool { return e.reason == "NodeAvoided" }) {
		t.Error("NodeAvoided after one index failed there, want it at two")
	}
	c.fail(podOfIndex(c, 1), 3, false)
	p = c.sync()
	var avoidedEvents []event
	for _, e := range p.events {
		if e.reason == "NodeAvoided" {
			avoidedEvents = append(avoidedEvents, e)
		}
	}
	if len(avoidedEvents) != 1 || !strings.Contains(avoidedEvents[0].message, "Node bad: 2 of the job's indexes failed there") {
		t.Errorf("events %+v, want one NodeAvoided for node bad", p.events)
	}
	c.advance(11 * time.Second)
	c.sync()
	if got := avoided(podOfIndex(c, 1)); !slices.Equal(got, []string{"bad"}) {
		t.Errorf("index 1's retry avoids %v, want [bad]", got)
	}

	// The operator restarts; the failed pods are gone.
	c.r = c.newReconciler()
	c.cache.Unsettle(c.job.Namespace, c.job.Name)
	c.fail(podOfIndex(c, 2), 7, false)
	c.sync()
	c.advance(11 * time.Second)
	c.sync()
	if got := avoided(podOfIndex(c, 2)); !slices.Equal(got, []string{"good", "bad"}) {
		t.Errorf("index 2's retry after a restart avoids %v, want [good bad]: its own node, then the job's", got)
	}
	rec := c.readRecord()
	want := map[int32]string{0: "bad", 1: "bad", 2: "good"}
	for ix, node := range want {
		got := rec.Attempts(ix)
		if len(got) != 1 || got[0].Node != node || !got[0].HasExit || got[0].Action != failrecord.ActionCount {
			t.Errorf("index %d's record %+v, want one counted failure on %s with its exit code", ix, got, node)
		}
	}
	if got := rec.Attempts(2); len(got) == 1 && got[0].ExitCode != 7 {
		t.Errorf("index 2's exit code %d, want 7", got[0].ExitCode)
	}
}

// A Required pod the scheduler cannot place once its avoided nodes are
// left out sets condition PodsUnschedulable with the scheduler's message;
// it goes once the pod is placed.
func TestUnplaceableAvoidanceShowsInTheStatus(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(1).
		BackoffLimitPerIndex(3).NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj())
	c.sync()
	c.bind(podOfIndex(c, 0), "only")
	c.fail(podOfIndex(c, 0), 1, false)
	c.sync()
	c.advance(11 * time.Second)
	c.sync()
	retry := podOfIndex(c, 0)
	c.update(retry, true, func(pod *corev1.Pod) {
		pod.Status.Conditions = append(pod.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector."})
	})
	c.reload(retry.Name)
	c.sync()
	cond := meta.FindStatusCondition(c.job.Status.Conditions, ibjv1.ConditionPodsUnschedulable)
	if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != ibjv1.ReasonAvoidedNodes ||
		!strings.Contains(cond.Message, "avoids node(s) only") || !strings.Contains(cond.Message, "0/1 nodes are available") {
		t.Fatalf("condition %+v, want PodsUnschedulable naming the avoided node and the scheduler's message", cond)
	}
	c.update(retry, true, func(pod *corev1.Pod) {
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}
	})
	c.reload(retry.Name)
	c.sync()
	if cond := meta.FindStatusCondition(c.job.Status.Conditions, ibjv1.ConditionPodsUnschedulable); cond != nil {
		t.Errorf("condition %+v stays after the pod was placed", cond)
	}
}

// A ConfigMap of the record's name that the job does not control is left
// alone: the record is refused (condition FailureRecorded), the failure is
// counted all the same and its pod released.
func TestARecordNameTakenIsReportedAndCountsGoOn(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(1).BackoffLimit(3).Obj())
	squatter := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: failrecord.ShardName("a", 0), Namespace: "ns"}, Data: map[string]string{"x": "y"}}
	if err := c.api.Create(context.Background(), squatter); err != nil {
		t.Fatal(err)
	}
	c.sync()
	c.bind(podOfIndex(c, 0), "n1")
	failed := podOfIndex(c, 0)
	c.fail(failed, 1, false)
	c.sync()
	c.sync()
	if c.job.Status.Failed != 1 {
		t.Errorf("failed = %d, want 1: a refused record holds no count back", c.job.Status.Failed)
	}
	if p := c.pod(failed.UID); p != nil && slices.Contains(p.Finalizers, ibjv1.TrackingFinalizer) {
		t.Error("the failed pod keeps its finalizer while the record is refused")
	}
	cond := meta.FindStatusCondition(c.job.Status.Conditions, ibjv1.ConditionFailureRecorded)
	if cond == nil || cond.Status != metav1.ConditionFalse || !strings.Contains(cond.Message, "not control") {
		t.Errorf("condition %+v, want FailureRecorded False naming the taken name", cond)
	}
	var got corev1.ConfigMap
	if err := c.api.Get(context.Background(), client.ObjectKeyFromObject(squatter), &got); err != nil || !cmp.Equal(got.Data, squatter.Data) {
		t.Errorf("the squatter's ConfigMap was changed: %v %v", got.Data, err)
	}
}

// A shard someone deleted is written again with what the record holds; a
// ConfigMap dressed as a shard of an index the job does not have, or not
// controlled by the job, is never read into it.
func TestTheRecordSurvivesEditsOfItsConfigMaps(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).BackoffLimitPerIndex(3).Obj())
	forged := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: failrecord.ShardName("a", 7), Namespace: "ns",
			Labels:          map[string]string{ibjv1.FailureRecordLabel: string(c.job.UID)},
			OwnerReferences: []metav1.OwnerReference{podbuild.ControllerRef(c.job)}},
		Data: map[string]string{failrecord.DataKey: "3590\t0\t2026-12-07T08:00:00Z\tforged\tmain\t1\tError\t-\tCount\n"},
	}
	if err := c.api.Create(context.Background(), forged); err != nil {
		t.Fatal(err)
	}
	c.sync()
	c.bind(podOfIndex(c, 0), "n1")
	c.fail(podOfIndex(c, 0), 1, false)
	c.sync()
	shard0 := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: failrecord.ShardName("a", 0), Namespace: "ns"}}
	if err := c.api.Delete(context.Background(), shard0); err != nil {
		t.Fatalf("the first failure wrote no shard 0: %v", err)
	}
	// The next failure's write finds shard 0 gone, and creates it again.
	c.bind(podOfIndex(c, 1), "n2")
	c.fail(podOfIndex(c, 1), 1, false)
	c.sync()
	c.advance(11 * time.Second)
	c.sync()
	// A new process reads the record, leaving the forged shard out.
	c.r = c.newReconciler()
	c.cache.Unsettle(c.job.Namespace, c.job.Name)
	c.sync()
	rec := c.readRecord()
	if rec.Attempts(0) == nil || rec.Attempts(1) == nil {
		t.Errorf("shard 0 holds %v and %v, want index 0's failure written again with index 1's", rec.Attempts(0), rec.Attempts(1))
	}
	if got := c.r.jobs.failures(c.job.UID).record.Attempts(3590); got != nil {
		t.Errorf("the forged shard of an index the job does not have was read: %+v", got)
	}
}
