package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// runUntilSettled lets the job's running pods succeed, a round at a time
// (the kubelet, a minute, a sync), until the pod cache keeps at least
// want of them out of the syncs.
func runUntilSettled(t *testing.T, c *cluster, want int) {
	t.Helper()
	for i := 0; i < 50 && c.cache.settledCount() < want; i++ {
		for _, p := range c.pods {
			if jobpod.Read(p).Active() {
				c.succeed(p)
			}
		}
		c.kubelet()
		c.advance(time.Minute)
		c.sync()
	}
	if got := c.cache.settledCount(); got < want {
		t.Fatalf("%d pods settled, want at least %d", got, want)
	}
}

// listedBySync is how many pods the job's next sync reads.
func listedBySync(c *cluster) int {
	pods, _, _ := c.cache.ListUnsettled(c.job.Namespace, c.job.Name, c.job.UID)
	return len(pods)
}

func TestSettledPodsLeaveTheSyncsAndTheCountStaysExact(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(40).Parallelism(4).Obj())
	c.sync()
	runUntilSettled(t, c, 20)
	if got := listedBySync(c); got > len(c.pods)-20 {
		t.Errorf("a sync reads %d of the job's %d pods, want at most %d: settled pods are listed", got, len(c.pods), len(c.pods)-20)
	}
	c.settle()
	if got := c.job.Status.Succeeded; got != 40 {
		t.Errorf("status.succeeded %d, want 40", got)
	}
}

func TestSettledPodsAreReadAgainWhenTheIndexSetIsRebuilt(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(40).Parallelism(3).Obj())
	c.sync()
	runUntilSettled(t, c, 4)
	completed := c.job.Status.CompletedIndexes
	created := len(c.pods)

	// Someone writes the status by hand: the sync rebuilds the index set
	// from the pods, the settled ones included, and starts none of their
	// indexes again.
	job := c.job.DeepCopy()
	job.Status.CompletedIndexes = "not an index set"
	if err := c.api.Status().Update(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	c.readJob()
	c.sync()
	c.advance(2 * statusCounterInterval) // the rebuilt set moves only counters
	c.sync()
	if got := c.job.Status.CompletedIndexes; got != completed {
		t.Errorf("completedIndexes rebuilt as %q, want %q", got, completed)
	}
	for _, p := range c.pods[created:] {
		if ix := jobpod.Read(p).Index; mustParse(t, completed).Has(ix) {
			t.Errorf("pod %s started again for completed index %d", p.Name, ix)
		}
	}
	c.settle()
}

func TestASyncWithoutTheSettledPodsAsksForThemWhenTheyMatter(t *testing.T) {
	job := func(completions int32, completed string) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob("a", "ns").UID("123").Completions(completions).Parallelism(completions).Obj()
		j.Status.CompletedIndexes = completed
		j.Status.StartTime = &metav1.Time{Time: testNow}
		return j
	}
	restarting := job(8, "0-7")
	restarting.Spec.MaxRestarts = ptr.To[int32](1)
	cases := []struct {
		name    string
		job     *ibjv1.IndexedBatchJob
		settled indexset.Set
		want    bool
	}{
		{"settled indexes completed", job(12, "0-7"), indexset.Range(0, 7), false},
		{"no pod settled", job(12, "0-7"), indexset.Set{}, false},
		{"scaled down below settled indexes", job(6, "0-7"), indexset.Range(0, 7), true},
		{"completed set unreadable", job(12, "garbage"), indexset.Range(0, 7), true},
		{"completed set lost an index", job(12, "0-3,5-7"), indexset.Range(0, 7), true},
		{"a job that restarts its pods", restarting, indexset.Range(0, 3), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := syncJob(syncInput{job: tc.job, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true, settled: tc.settled})
			if p.needAllPods != tc.want {
				t.Errorf("needAllPods %v, want %v", p.needAllPods, tc.want)
			}
			if tc.want {
				return
			}
			// Indexes 8 to 11 start; none of the completed ones.
			if len(p.create) != 4 {
				t.Errorf("%d pods to create, want 4", len(p.create))
			}
			for _, c := range p.create {
				if c.Index < 8 {
					t.Errorf("a pod to create for completed index %d", c.Index)
				}
			}
		})
	}
}

func mustParse(t *testing.T, s string) indexset.Set {
	t.Helper()
	set, err := indexset.Parse(s, 0)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestASettledSuccessResetsTheJobWideBackoff(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(2).Obj()
	job.Status.CompletedIndexes = "1"
	counted := func(w *podWrapper) *jobpod.Pod { return w.withoutFinalizer().obj() }
	pods := []*jobpod.Pod{
		counted(makePod(job, 0).failedAt(testNow.Add(-time.Minute), 1)),
		counted(makePod(job, 2).failedAt(testNow.Add(-5*time.Second), 1)),
	}
	// The success of index 1, settled 30 s ago, is not among the pods:
	// only the failure after it counts (10 s from the latest), as when its
	// pod is listed.
	p := syncJob(syncInput{job: job, pods: pods, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true,
		settled: indexset.Of(1), settledSuccess: testNow.Add(-30 * time.Second)})
	if len(p.create) != 0 || p.requeueAfter != 5*time.Second {
		t.Errorf("created %v, requeueAfter %v; want none, 5s", createdIndexes(p), p.requeueAfter)
	}
	listed := syncOnce(job, append(pods, counted(makePod(job, 1).succeededAt(testNow.Add(-30*time.Second))))...)
	if listed.requeueAfter != p.requeueAfter {
		t.Errorf("with the success listed, requeueAfter %v; without, %v", listed.requeueAfter, p.requeueAfter)
	}
}
