package controller

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestGonePodsRememberDeletedFailuresUntilTheyAreGone(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job").Completions(4).Parallelism(4).Obj()
	deleted := makePod(job, 0).failedAt(testNow.Add(-5*time.Second), 143).deletedAt(testNow.Add(-15 * time.Second)).obj()
	notDeleted := makePod(job, 1).failedAt(testNow.Add(-5*time.Second), 1).obj()
	running := makePod(job, 2).running().deletedAt(testNow.Add(-time.Second)).obj()
	succeeded := makePod(job, 3).succeededAt(testNow.Add(-time.Second)).deletedAt(testNow).obj()
	g := newJobStates()

	if gone := g.observeGone(job, []*jobpod.Pod{deleted, notDeleted, running, succeeded}); len(gone) != 0 {
		t.Fatalf("gone while every pod is there: %+v", gone)
	}
	// The deleted failed pod is gone, and so is the running one deleted,
	// whose deletion fails it (podReplacementPolicy TerminatingOrFailed);
	// the others are no failure, or still in the cache.
	gone := g.observeGone(job, []*jobpod.Pod{notDeleted})
	want := []gonePod{
		{uid: deleted.UID, index: 0, attempt: 0, finishedAt: deleted.FinishedAt, counted: true},
		{uid: running.UID, index: 2, attempt: 0, finishedAt: running.FinishedAt, counted: true},
	}
	if !slices.Equal(gone, want) {
		t.Fatalf("gone = %+v, want %+v", gone, want)
	}
	if floors := goneFloors(gone, map[int32]int32{2: 3}); floors[0] != 1 || floors[2] != 3 {
		t.Errorf("floors = %v, want index 0 past attempt 0 and index 2's higher floor kept", floors)
	}
	if n := g.sizes()["gone_pods"]; n != 1 {
		t.Errorf("jobs with gone pods = %d, want 1", n)
	}
	g.forget(job.UID)
	if g.sizes()["gone_pods"] != 0 || len(g.observeGone(job, nil)) != 0 {
		t.Errorf("a forgotten job is still remembered")
	}
}

func TestGonePodsKeepTheLatestFailuresOfAJob(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job").Completions(100).Parallelism(100).Obj()
	g := newJobStates()
	var pods []*jobpod.Pod
	for ix := range int32(maxGonePerJob + 10) {
		at := testNow.Add(time.Duration(ix) * time.Second)
		pods = append(pods, makePod(job, ix).failedAt(at, 143).deletedAt(at).obj())
	}
	g.observeGone(job, pods)
	gone := g.observeGone(job, nil)
	if len(gone) != maxGonePerJob {
		t.Fatalf("kept %d, want %d", len(gone), maxGonePerJob)
	}
	for _, p := range gone {
		if p.index < 10 {
			t.Errorf("kept index %d, one of the oldest failures", p.index)
		}
	}
}

// A gone pod keeps how its failure counted: one an Ignore rule matched
// stays ignored, with its rule's retry delay.
func TestGonePodsKeepHowTheFailureCounted(t *testing.T) {
	job := delayRule(harness.MakeIndexedBatchJob("a", "ns").UID("job").Completions(2).Parallelism(2).
		PodFailurePolicy(harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue)).Obj(), 0, 30)
	evicted := makePod(job, 0).failedAt(testNow, 137).condition(corev1.DisruptionTarget, corev1.ConditionTrue).deletedAt(testNow).obj()
	killed := makePod(job, 1).failedAt(testNow, 137).deletedAt(testNow).obj()
	g := newJobStates()
	g.observeGone(job, []*jobpod.Pod{evicted, killed})
	gone := g.observeGone(job, nil)
	want := []gonePod{
		{uid: evicted.UID, index: 0, finishedAt: evicted.FinishedAt, retryDelay: ptr.To(30 * time.Second)},
		{uid: killed.UID, index: 1, finishedAt: killed.FinishedAt, counted: true},
	}
	if diff := cmp.Diff(want, gone, cmp.AllowUnexported(gonePod{})); diff != "" {
		t.Errorf("gone (-want +got):\n%s", diff)
	}
}

// A pod deleted while it ran (a user, an eviction) fails and, once its
// finalizer goes, is removed by the API server: its failure still holds the
// job-wide backoff back, and its index's next pod is not named after attempt
// 0 again, as the node specs found on a real kubelet.
func TestGlobalBackoffCountsAGoneDeletedPod(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(1).Parallelism(1).Obj()
	cases := []struct {
		name        string
		finished    time.Duration // before testNow
		ignored     bool          // an Ignore rule matched it
		retryDelay  *time.Duration
		wantCreate  bool
		wantRequeue time.Duration
	}{
		{name: "within the backoff", finished: 4 * time.Second, wantRequeue: 6 * time.Second},
		{name: "past the backoff", finished: 11 * time.Second, wantCreate: true},
		// Counted while it was there or gone, a failure waits alike.
		{name: "ignored: at once", finished: time.Second, ignored: true, wantCreate: true},
		{name: "ignored, within its rule's delay", finished: 10 * time.Second, ignored: true, retryDelay: ptr.To(30 * time.Second), wantRequeue: 20 * time.Second},
		{name: "counted, within its rule's delay", finished: 20 * time.Second, retryDelay: ptr.To(30 * time.Second), wantRequeue: 10 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gone := []gonePod{{uid: "uid-a-0-0", index: 0, attempt: 0, finishedAt: testNow.Add(-tc.finished), counted: !tc.ignored, retryDelay: tc.retryDelay}}
			p := syncJob(syncInput{job: job, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true,
				gone: gone, nameFloors: goneFloors(gone, nil)})
			if got := len(p.create) > 0; got != tc.wantCreate || p.requeueAfter != tc.wantRequeue {
				t.Fatalf("created %v, requeueAfter %v; want %v, %v", p.create, p.requeueAfter, tc.wantCreate, tc.wantRequeue)
			}
			if tc.wantCreate && p.create[0].Attempt != 1 {
				t.Errorf("the replacement is attempt %d, want 1: past the gone pod's name", p.create[0].Attempt)
			}
		})
	}
}
