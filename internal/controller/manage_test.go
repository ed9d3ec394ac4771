package controller

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestCreatesLowestIndexesFirstUpToParallelism(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns").Completions(8)
	cases := []struct {
		name       string
		job        *ibjv1.IndexedBatchJob
		completed  string
		pods       func(*ibjv1.IndexedBatchJob) []*jobpod.Pod
		want       []int32
		wantActive int32
	}{
		{name: "new job", job: base.Clone().Parallelism(3).Obj(), want: []int32{0, 1, 2}, wantActive: 3},
		{name: "parallelism defaults to 1", job: base.Clone().Obj(), want: []int32{0}, wantActive: 1},
		{name: "parallelism above completions", job: base.Clone().Completions(3).Parallelism(5).Obj(), want: []int32{0, 1, 2}, wantActive: 3},
		{name: "parallelism 0", job: base.Clone().Parallelism(0).Obj(), want: []int32{}, wantActive: 0},
		{
			name: "skips active and completed indexes", job: base.Clone().Parallelism(3).Obj(), completed: "1",
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod { return []*jobpod.Pod{makePod(j, 0).running().obj()} },
			want: []int32{2, 3}, wantActive: 3,
		},
		{
			name: "full", job: base.Clone().Parallelism(2).Obj(),
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 5).running().obj(), makePod(j, 6).obj()}
			},
			want: []int32{}, wantActive: 2,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.job.Status.CompletedIndexes = tc.completed
			var pods []*jobpod.Pod
			if tc.pods != nil {
				pods = tc.pods(tc.job)
			}
			p := syncOnce(tc.job, pods...)
			if got := createdIndexes(p); !slices.Equal(got, tc.want) {
				t.Errorf("created indexes %v, want %v", got, tc.want)
			}
			if p.status.Active != tc.wantActive {
				t.Errorf("active = %d, want %d", p.status.Active, tc.wantActive)
			}
			if p.status.StartTime == nil || !p.status.StartTime.Time.Equal(testNow) || p.status.Phase != ibjv1.PhaseRunning {
				t.Errorf("startTime = %v, phase = %s; want %v, Running", p.status.StartTime, p.status.Phase, testNow)
			}
			for _, c := range p.create {
				if c.Attempt != 0 || c.Failures != 0 {
					t.Errorf("first pod of index %d has attempt %d, failures %d", c.Index, c.Attempt, c.Failures)
				}
			}
		})
	}
}

func TestNoCreateWhileExpectationsUnsatisfied(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).Obj()
	pod := makePod(job, 0).running().obj()
	p := syncJob(syncInput{job: job, pods: []*jobpod.Pod{pod}, now: testNow, backoff: jobpod.DefaultBackoff})
	if len(p.create) != 0 {
		t.Errorf("created %v from a cache that may not show this controller's own creates", createdIndexes(p))
	}
	if p.status.Active != 1 {
		t.Errorf("active = %d, want 1", p.status.Active)
	}
}

func TestReadyCountsReadyActivePods(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).Obj()
	p := syncOnce(job, makePod(job, 0).ready().obj(), makePod(job, 1).running().obj(), makePod(job, 2).ready().deletedAt(testNow).obj())
	if *p.status.Ready != 1 || p.status.Active != 2 || *p.status.Terminating != 1 {
		t.Errorf("ready/active/terminating = %d/%d/%d, want 1/2/1", *p.status.Ready, p.status.Active, *p.status.Terminating)
	}
}

func TestBackoffOfDeletedReadyPodRunsFromItsDeletion(t *testing.T) {
	// The pod became Ready an hour ago and was deleted just now: its failure
	// (TerminatingOrFailed) is 0 s old, not an hour.
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).Obj()
	p := syncOnce(job, makePod(job, 0).ready().deletedAt(testNow.Add(-3*time.Second)).obj())
	if len(p.create) != 0 || p.requeueAfter != 7*time.Second {
		t.Errorf("creates = %v, requeueAfter = %v; want the 10s backoff from the deletion", createdIndexes(p), p.requeueAfter)
	}
}

func TestFailedReplacementWaitsForTermination(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(2).PodReplacementPolicy(batchv1.Failed).Obj()
	terminating := makePod(job, 0).running().deletedAt(testNow.Add(-time.Minute)).obj()
	pods := []*jobpod.Pod{terminating, makePod(job, 1).running().obj()}

	p := syncOnce(job, pods...)
	if len(p.create) != 0 {
		t.Errorf("created %v: the terminating pod holds both its index and a slot of parallelism 2", createdIndexes(p))
	}
	if *p.status.Terminating != 1 || p.status.Active != 1 || p.status.UncountedTerminatedPods != nil {
		t.Errorf("terminating = %d, active = %d, uncounted = %v", *p.status.Terminating, p.status.Active, p.status.UncountedTerminatedPods)
	}

	// With a free slot, another index starts, but not the terminating one's.
	wide := job.DeepCopy()
	wide.Spec.Parallelism = ptr.To[int32](3)
	if got := createdIndexes(syncOnce(wide, pods...)); !slices.Equal(got, []int32{2}) {
		t.Errorf("created %v, want only index 2", got)
	}

	// Once it failed, it is counted and replaced.
	pods[0] = makePod(job, 0).failedAt(testNow.Add(-time.Minute), 137).deletedAt(testNow.Add(-time.Minute)).obj()
	p = syncOnce(job, pods...)
	if _, fail := uncounted(p.status); len(fail) != 1 || len(p.create) != 1 || p.create[0].Index != 0 || p.create[0].Attempt != 1 {
		t.Errorf("uncounted failed = %v, creates = %+v; want it counted and index 0 retried", fail, p.create)
	}
}

func TestTerminatingOrFailedReplacesTerminatingPodAtOnce(t *testing.T) {
	for _, policy := range []*batchv1.PodReplacementPolicy{nil, ptr.To(batchv1.TerminatingOrFailed)} {
		job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(2).Obj()
		job.Spec.PodReplacementPolicy = policy
		// Deleted a minute ago: the 10 s backoff of its failure has passed.
		terminating := makePod(job, 0).running().deletedAt(testNow.Add(-time.Minute)).obj()
		p := syncOnce(job, terminating, makePod(job, 1).running().obj())
		if _, fail := uncounted(p.status); !slices.Equal(fail, []types.UID{terminating.UID}) {
			t.Errorf("uncounted failed = %v, want the terminating pod counted as failed", fail)
		}
		if len(p.create) != 1 || p.create[0].Index != 0 || p.create[0].Attempt != 1 {
			t.Errorf("creates = %+v, want index 0 replaced without waiting for phase Failed", p.create)
		}
		if *p.status.Terminating != 1 || p.status.Active != 2 {
			t.Errorf("terminating = %d, active = %d; want 1, 2", *p.status.Terminating, p.status.Active)
		}
	}
}

func TestSuspendDeletesActivePodsWithoutCountingThem(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(3).Suspend(true).ActiveDeadlineSeconds(10).Obj()
	job.Status.StartTime = &metav1.Time{Time: testNow.Add(-5 * time.Second)}
	done := makePod(job, 2).succeededAt(testNow).obj()
	p := syncOnce(job, makePod(job, 0).running().obj(), makePod(job, 1).obj(), done)

	if got := deletions(p); len(got) != 2 || !got["a-0-0"] || !got["a-1-0"] {
		t.Errorf("deletions = %v, want both active pods deleted with their finalizer stripped", got)
	}
	wantCondition(t, p.status, ibjv1.ConditionSuspended, ibjv1.ReasonJobSuspended)
	if p.status.StartTime != nil || p.status.Phase != ibjv1.PhaseSuspended || p.status.Active != 0 || *p.status.Terminating != 2 {
		t.Errorf("startTime = %v, phase = %s, active = %d, terminating = %d", p.status.StartTime, p.status.Phase, p.status.Active, *p.status.Terminating)
	}
	if p.status.Failed != 0 || len(p.create) != 0 {
		t.Errorf("failed = %d, creates = %v", p.status.Failed, createdIndexes(p))
	}
	if p.status.CompletedIndexes != "2" || p.status.Succeeded != 1 || !slices.Equal(names(p.releaseLater), []string{done.Name}) {
		t.Errorf("completedIndexes = %q, succeeded = %d, releaseLater = %v: a pod that succeeded before the suspension is still recorded",
			p.status.CompletedIndexes, p.status.Succeeded, names(p.releaseLater))
	}
	if len(p.events) != 1 || p.events[0].reason != "Suspended" {
		t.Errorf("events = %+v, want one Suspended event", p.events)
	}
	if p.requeueAfter != 0 {
		t.Errorf("requeueAfter = %v: the deadline does not run while suspended", p.requeueAfter)
	}

	// Suspending again changes nothing and says nothing.
	job.Status = p.status
	if p = syncOnce(job); len(p.events) != 0 {
		t.Errorf("events = %+v on an already suspended job", p.events)
	}
}

func TestPerIndexBackoffDelaysTheRetry(t *testing.T) {
	cases := []struct {
		name        string
		failures    int32 // earlier failures of the index, on the failed pod
		failedAgo   time.Duration
		wantRetry   bool
		wantRequeue time.Duration
	}{
		{"first failure, 5s ago", 0, 5 * time.Second, false, 5 * time.Second},
		{"first failure, 10s ago", 0, 10 * time.Second, true, 0},
		{"second failure waits 20s", 1, 15 * time.Second, false, 5 * time.Second},
		{"fourth failure waits 80s", 3, 79 * time.Second, false, time.Second},
		{"eighth failure waits the 10min cap", 7, 9 * time.Minute, false, time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(2).BackoffLimitPerIndex(10).Obj()
			failed := makePodFor(job, podbuild.Spec{Index: 0, Attempt: tc.failures, Failures: tc.failures}).failedAt(testNow.Add(-tc.failedAgo), 1).obj()
			p := syncOnce(job, failed)
			retried := slices.Contains(createdIndexes(p), 0)
			if retried != tc.wantRetry || p.requeueAfter != tc.wantRequeue {
				t.Errorf("retried = %v, requeueAfter = %v; want %v, %v", retried, p.requeueAfter, tc.wantRetry, tc.wantRequeue)
			}
			// Another index does not wait for index 0's backoff.
			if !slices.Contains(createdIndexes(p), 1) {
				t.Errorf("created %v, want index 1 started meanwhile", createdIndexes(p))
			}
			if retried && (p.create[0].Attempt != tc.failures+1 || p.create[0].Failures != tc.failures+1) {
				t.Errorf("retry = %+v", p.create[0])
			}
		})
	}
}

func TestGlobalBackoffDelaysReplacement(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(2).Obj()
	counted := func(w *podWrapper) *jobpod.Pod { return w.withoutFinalizer().obj() }
	cases := []struct {
		name        string
		pods        []*jobpod.Pod
		wantCreates []int32
		wantRequeue time.Duration
	}{
		{"one failure 5s ago", []*jobpod.Pod{counted(makePod(job, 0).failedAt(testNow.Add(-5*time.Second), 1))}, []int32{}, 5 * time.Second},
		{"two failures: 20s from the latest", []*jobpod.Pod{
			counted(makePod(job, 0).failedAt(testNow.Add(-time.Minute), 1)),
			counted(makePod(job, 1).failedAt(testNow.Add(-5*time.Second), 1)),
		}, []int32{}, 15 * time.Second},
		{"a success resets the count", []*jobpod.Pod{
			counted(makePod(job, 0).failedAt(testNow.Add(-time.Minute), 1)),
			counted(makePod(job, 1).succeededAt(testNow.Add(-30 * time.Second))),
			counted(makePod(job, 2).failedAt(testNow.Add(-5*time.Second), 1)),
		}, []int32{}, 5 * time.Second},
		{"backoff passed", []*jobpod.Pod{counted(makePod(job, 0).failedAt(testNow.Add(-11*time.Second), 1))}, []int32{0, 1}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := syncOnce(job, tc.pods...)
			if got := createdIndexes(p); !slices.Equal(got, tc.wantCreates) || p.requeueAfter != tc.wantRequeue {
				t.Errorf("created %v, requeueAfter %v; want %v, %v", got, p.requeueAfter, tc.wantCreates, tc.wantRequeue)
			}
		})
	}
}

func TestPodsWithInvalidIndexAreDeleted(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(1).Obj()
	valid := makePod(job, 0).running().obj()
	malformed := makePod(job, 1).label(ibjv1.CompletionIndexLabel, "x").running().uid("bad-1").obj()
	beyond := makePod(job, 1).label(ibjv1.CompletionIndexLabel, "9").annotation(ibjv1.CompletionIndexLabel, "9").uid("bad-2").obj()
	goneAlready := makePod(job, 1).label(ibjv1.CompletionIndexLabel, "-2").deletedAt(testNow).withoutFinalizer().uid("bad-3").obj()
	malformed.Name, beyond.Name, goneAlready.Name = "bad-1", "bad-2", "bad-3"

	p := syncOnce(job, valid, malformed, beyond, goneAlready)
	if got := deletions(p); len(got) != 2 || !got["bad-1"] || !got["bad-2"] {
		t.Errorf("deletions = %v, want bad-1 and bad-2 deleted, finalizers stripped", got)
	}
	if p.status.Active != 1 || len(p.create) != 0 {
		t.Errorf("active = %d, creates = %v; pods with a bad index do not count", p.status.Active, createdIndexes(p))
	}
	if *p.status.Terminating != 3 {
		t.Errorf("terminating = %d, want 3: a pod being removed terminates whatever its index", *p.status.Terminating)
	}
}

func TestActivePodsOfFinishedIndexesAndDuplicatesAreRemoved(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).Obj()
	job.Status.CompletedIndexes = "0"
	late := makePod(job, 0).running().obj()
	first := makePod(job, 1).running().obj()
	dup := makePodFor(job, podbuild.Spec{Index: 1, Attempt: 1}).running().obj()
	p := syncOnce(job, late, first, dup, makePod(job, 2).running().obj())
	if got := deletions(p); len(got) != 2 || !got[late.Name] || !got[dup.Name] {
		t.Errorf("deletions = %v, want %s and %s removed uncounted", got, late.Name, dup.Name)
	}
	if p.status.Active != 2 || p.status.Failed != 0 {
		t.Errorf("active = %d, failed = %d", p.status.Active, p.status.Failed)
	}
}

// A job with thousands of pods to start creates at most maxCreatesPerSync
// of them in one sync and comes back for the rest, so that the workers and
// the client's budget go round the jobs instead of staying with the big one.
func TestSyncCreatesAtMostMaxCreatesPerSync(t *testing.T) {
	job := harness.MakeIndexedBatchJob("big", "ns").Completions(3000).Parallelism(2000).Obj()
	p := syncOnce(job)
	if len(p.create) != maxCreatesPerSync || p.status.Active != maxCreatesPerSync {
		t.Errorf("%d creates, active %d; want %d of each", len(p.create), p.status.Active, maxCreatesPerSync)
	}
	if p.create[0].Index != 0 || p.create[len(p.create)-1].Index != maxCreatesPerSync-1 {
		t.Errorf("created indexes %d to %d, want the lowest", p.create[0].Index, p.create[len(p.create)-1].Index)
	}
	if p.requeueAfter != time.Second {
		t.Errorf("requeue after %v, want 1s for the rest", p.requeueAfter)
	}
	small := harness.MakeIndexedBatchJob("small", "ns").Completions(10).Parallelism(10).Obj()
	if p := syncOnce(small); len(p.create) != 10 || p.requeueAfter != 0 {
		t.Errorf("a small job: %d creates, requeue after %v; want 10 and none", len(p.create), p.requeueAfter)
	}
}

func TestRefusedReplacementNeverHoldsTheCountBack(t *testing.T) {
	// The failed pod carries index 0's failure count until its replacement
	// exists, but its failure is counted at once: a quota or a policy that
	// refuses the replacement holds nothing of the status back.
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(1).BackoffLimitPerIndex(2).Obj())
	c.sync()
	failed := podOfIndex(c, 0)
	if !slices.Contains(failed.Finalizers, ibjv1.IndexRetryFinalizer) {
		t.Fatalf("finalizers %v, want the index-retry finalizer on a pod of a job with backoffLimitPerIndex", failed.Finalizers)
	}
	c.fail(failed, 1, false)
	c.advance(11 * time.Second)
	for i := range 3 {
		c.fault = &writeFault{step: stepCreate} // every create refused
		p := c.sync()
		if len(p.create) != 1 {
			t.Fatalf("sync %d: creates = %v, want the retry of index 0 tried", i, createdIndexes(p))
		}
	}
	held := c.pod(failed.UID)
	switch {
	case c.job.Status.Failed != 1 || c.job.Status.UncountedTerminatedPods != nil:
		t.Errorf("failed = %d, uncounted = %v while the retry is refused; want 1 and none", c.job.Status.Failed, c.job.Status.UncountedTerminatedPods)
	case held == nil:
		t.Fatalf("the failed pod went before its replacement exists")
	case slices.Contains(held.Finalizers, ibjv1.TrackingFinalizer) || !slices.Contains(held.Finalizers, ibjv1.IndexRetryFinalizer):
		t.Errorf("finalizers %v, want the index-retry finalizer only", held.Finalizers)
	}

	p := c.sync() // the create goes through
	if len(p.create) != 1 || p.create[0].Failures != 1 || p.create[0].Attempt != 1 {
		t.Fatalf("creates = %+v, want index 0 retried as attempt 1 with one failure", p.create)
	}
	p = c.sync()
	if !slices.Contains(names(p.removeFinalizer), failed.Name) {
		t.Errorf("removeFinalizer = %v, want the failed pod let go once replaced", names(p.removeFinalizer))
	}
	if c.job.Status.Failed != 1 {
		t.Errorf("failed = %d after the retry, want 1 (counted once)", c.job.Status.Failed)
	}
}

// A sync that sees a failure younger than the batch period, or one the
// cache saw less than the period ago, starts no pod until the period is
// over, whatever event brought it: a failure that lands a moment later
// decides the job's end first. A kubelet's clock ahead of the operator's
// never holds pods longer than the period.
func TestPodsWaitForTheBatchOfAFreshFailure(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(10).Parallelism(5).BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj()
	pods := func(failedAt time.Time) []*jobpod.Pod {
		out := []*jobpod.Pod{makePod(job, 2).failedAt(failedAt, 1).obj()}
		for _, ix := range []int32{0, 1, 3, 4} {
			out = append(out, makePod(job, ix).running().ready().obj())
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		failedAt time.Time
		// seen is when the cache saw the failure (zero: unknown).
		seen    time.Time
		creates int
		requeue time.Duration
	}{
		{"a failure 200 ms old", testNow.Add(-200 * time.Millisecond), time.Time{}, 0, 800 * time.Millisecond},
		{"a failure a batch period old", testNow.Add(-podEventBatchPeriod), time.Time{}, 1, 0},
		{"a failure dated 10 s ahead", testNow.Add(10 * time.Second), time.Time{}, 0, podEventBatchPeriod},
		// A failure that reached the cache late (its kubelet or the sync
		// lagged): the batch runs from when it was seen, so the next
		// failure of the batch, on its way too, is decided with it.
		{"a failure 5 s old, seen 300 ms ago", testNow.Add(-5 * time.Second), testNow.Add(-300 * time.Millisecond), 0, 700 * time.Millisecond},
		{"a failure 5 s old, seen a batch period ago", testNow.Add(-5 * time.Second), testNow.Add(-podEventBatchPeriod), 1, 0},
	} {
		p := syncJob(syncInput{job: job, pods: pods(tc.failedAt), now: testNow, expectationsSatisfied: true, failureSeen: tc.seen})
		if len(p.create) != tc.creates || p.requeueAfter != tc.requeue {
			t.Errorf("%s: creates %v, requeue %v; want %d creates and a requeue of %v", tc.name, createdIndexes(p), p.requeueAfter, tc.creates, tc.requeue)
		}
	}
}

// Under TerminatingOrFailed a deleted pod is a failure from its deletion:
// the pods of a lost node, deleted together by the taint eviction, are
// decided in one batch, not the first alone.
func TestPodsWaitForTheBatchOfAFreshDeletion(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).Obj()
	pods := []*jobpod.Pod{
		makePod(job, 0).running().deletedAt(testNow.Add(-200 * time.Millisecond)).obj(),
		makePod(job, 1).running().obj(),
	}
	p := syncJob(syncInput{job: job, pods: pods, now: testNow, expectationsSatisfied: true})
	if len(p.create) != 0 || p.requeueAfter != 800*time.Millisecond {
		t.Errorf("creates %v, requeue %v; want none until the batch period after the deletion is over (800ms)", createdIndexes(p), p.requeueAfter)
	}
	job.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
	p = syncJob(syncInput{job: job, pods: pods, now: testNow, expectationsSatisfied: true})
	if len(p.create) != 1 {
		t.Errorf("under Failed: creates %v, want index 2 started (a terminating pod is no failure yet)", createdIndexes(p))
	}
}
