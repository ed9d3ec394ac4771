package controller

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// among says whether a pod of the name is among pods, as the cache would.
func among(pods ...*jobpod.Pod) func(name string) bool {
	cached := cachedAmong(pods...)
	return func(name string) bool { return cached(name) != nil }
}

// cachedAmong looks a pod up by name among pods, as the cache does.
func cachedAmong(pods ...*jobpod.Pod) func(string) *jobpod.Pod {
	return func(name string) *jobpod.Pod {
		if i := slices.IndexFunc(pods, func(p *jobpod.Pod) bool { return p.Name == name }); i >= 0 {
			return pods[i]
		}
		return nil
	}
}

func TestExpectationsHoldUntilTheCacheShowsEveryCreate(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job").Completions(3).Obj()
	e := newJobStates()
	if !e.podsSeen(job.UID, among(), testNow) {
		t.Fatalf("a job without expectations must be satisfied")
	}
	e.expectCreate(job.UID, "a-0-0", testNow)
	e.expectCreate(job.UID, "a-1-0", testNow)

	p0 := makePod(job, 0).obj()
	if e.podsSeen(job.UID, among(p0), testNow.Add(time.Second)) {
		t.Errorf("satisfied while a-1-0 is not in the cache")
	}
	p1 := makePod(job, 1).obj()
	if !e.podsSeen(job.UID, among(p1), testNow.Add(time.Second)) {
		t.Errorf("not satisfied though a-0-0 was seen before and a-1-0 now")
	}
	if !e.podsSeen("other", among(), testNow) {
		t.Errorf("another job's expectations leaked")
	}
}

func TestExpectationsForgetARefusedCreate(t *testing.T) {
	e := newJobStates()
	e.expectCreate("job", "a-0-0", testNow)
	e.createFailed("job", "a-0-0")
	if !e.podsSeen("job", among(), testNow) {
		t.Errorf("a create the API server refused still blocks the job")
	}
}

func TestExpectationsExpireAfterTimeout(t *testing.T) {
	e := newJobStates()
	e.expectCreate("job", "a-0-0", testNow)
	if e.podsSeen("job", among(), testNow.Add(expectationTimeout)) {
		t.Errorf("expired at exactly the timeout")
	}
	if !e.podsSeen("job", among(), testNow.Add(expectationTimeout+time.Second)) {
		t.Errorf("a create never seen blocks the job past the timeout")
	}
}

func TestExpectationsTellAStaleJobFromItsResourceVersion(t *testing.T) {
	cases := []struct {
		name, written, cached string
		want                  bool
	}{
		{"older cache", "120", "119", true},
		{"caught up", "120", "120", false},
		{"newer cache", "120", "121", false},
		{"versions compared as numbers", "100", "99", true},
		{"unreadable cached version taken as current", "120", "abc", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newJobStates()
			if e.jobStale("job", tc.cached) {
				t.Fatalf("stale before any write")
			}
			e.wroteStatus("job", tc.written, time.Time{})
			if got := e.jobStale("job", tc.cached); got != tc.want {
				t.Errorf("jobStale = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExpectationsStopWaitingOnceTheCacheCaughtUp(t *testing.T) {
	e := newJobStates()
	e.wroteStatus("job", "10", time.Time{})
	if e.jobStale("job", "10") {
		t.Fatalf("stale although caught up")
	}
	// Once seen, the write is forgotten: an older cached version (a relist
	// after a compaction, say) must not block the job for good.
	if e.jobStale("job", "9") {
		t.Errorf("still comparing against a write already seen")
	}
}

func TestExpectationsForgetADeletedJob(t *testing.T) {
	e := newJobStates()
	e.expectCreate("job", "a-0-0", testNow)
	e.wroteStatus("job", "10", time.Time{})
	e.forget("job")
	if !e.podsSeen("job", among(), testNow) || e.jobStale("job", "1") {
		t.Errorf("expectations survived forget")
	}
}

func TestExpectationsSkipAFinalizerRemovalUntilTheCacheShowsIt(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job").Completions(3).Obj()
	e := newJobStates()
	p0 := makePod(job, 0).succeededAt(testNow).obj()
	p1 := makePod(job, 1).succeededAt(testNow).obj()
	if got := e.unpatched(job.UID, []*jobpod.Pod{p0, p1}); len(got) != 2 {
		t.Fatalf("nothing removed yet, got %d pods to patch, want 2", len(got))
	}
	e.removedFinalizers(job.UID, []*jobpod.Pod{p0}, testNow)
	if got := e.unpatched(job.UID, []*jobpod.Pod{p0, p1}); len(got) != 1 || got[0] != p1 {
		t.Fatalf("after removing p0's finalizer, got %v to patch, want only p1", got)
	}
	if got := e.unpatched("other", []*jobpod.Pod{p0}); len(got) != 1 {
		t.Errorf("another job's removals leaked")
	}

	// The cache still shows the finalizer: the removal stays remembered.
	e.observeFinalizers(job.UID, cachedAmong(p0, p1), testNow.Add(time.Second))
	if got := e.unpatched(job.UID, []*jobpod.Pod{p0}); len(got) != 0 {
		t.Errorf("forgot a removal the cache does not show yet")
	}
	// The cache shows it: forgotten, so a pod seen with the finalizer again
	// (a user put it back) is patched again.
	gone := makePod(job, 0).succeededAt(testNow).withoutFinalizer().obj()
	e.observeFinalizers(job.UID, cachedAmong(gone, p1), testNow.Add(2*time.Second))
	if got := e.unpatched(job.UID, []*jobpod.Pod{p0}); len(got) != 1 {
		t.Errorf("still skips a pod whose removal the cache has shown")
	}
}

func TestExpectationsForgetFinalizerRemovalsOfGonePodsAndAfterTimeout(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job").Completions(3).Obj()
	e := newJobStates()
	p0 := makePod(job, 0).succeededAt(testNow).obj()
	p1 := makePod(job, 1).succeededAt(testNow).obj()
	e.removedFinalizers(job.UID, []*jobpod.Pod{p0, p1}, testNow)

	e.observeFinalizers(job.UID, cachedAmong(p1), testNow.Add(finalizerExpectationTimeout))
	if got := e.unpatched(job.UID, []*jobpod.Pod{p0, p1}); len(got) != 1 || got[0] != p0 {
		t.Errorf("got %v to patch: p0 left the cache, so its removal is forgotten; p1's is kept up to the timeout", got)
	}
	e.observeFinalizers(job.UID, cachedAmong(p1), testNow.Add(finalizerExpectationTimeout+time.Second))
	if got := e.unpatched(job.UID, []*jobpod.Pod{p1}); len(got) != 1 {
		t.Errorf("a removal the cache never showed still blocks a patch past the timeout")
	}
	e.removedFinalizers(job.UID, []*jobpod.Pod{p1}, testNow)
	e.forget(job.UID)
	if got := e.unpatched(job.UID, []*jobpod.Pod{p1}); len(got) != 1 {
		t.Errorf("a deleted job's removals were kept")
	}
}

// A background release that lands after its job was forgotten leaves no
// entry behind: the soak found such entries piling up, one per job that
// went while its pods' finalizers were being removed.
func TestExpectationsKeepNothingOfAJobForgottenBeforeItsBackgroundRelease(t *testing.T) {
	e := newJobStates()
	now := time.Now()
	pod := &jobpod.Pod{Tracked: true}
	pod.Name, pod.UID = "a-0", "pod-a-0"
	e.seen(types.NamespacedName{Namespace: "ns", Name: "a"}, "job-a")
	e.releasedInBackground("job-a", pod, now)
	if got := e.unpatched("job-a", []*jobpod.Pod{pod}); len(got) != 0 {
		t.Errorf("a pod released in the background of a known job is still unpatched: %v", got)
	}
	e.forget("job-a")
	e.releasedInBackground("job-a", pod, now)
	if sizes := e.sizes(); sizes["job_states"] != 0 || sizes["expected_finalizers"] != 0 {
		t.Errorf("entries after a release of a forgotten job: %v, want none", sizes)
	}
}
