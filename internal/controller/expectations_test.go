package controller

import (
	"testing"
	"time"

	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
)

func TestExpectationsHoldUntilTheCacheShowsEveryCreate(t *testing.T) {
	job := utils.MakeIndexedBatchJob("a", "ns").UID("job").Completions(3).Obj()
	e := newExpectations()
	if !e.podsSeen(job.UID, nil, testNow) {
		t.Fatalf("a job without expectations must be satisfied")
	}
	e.expectCreate(job.UID, "a-0-0", testNow)
	e.expectCreate(job.UID, "a-1-0", testNow)

	p0 := makePod(job, 0).obj()
	if e.podsSeen(job.UID, []*cachedPod{p0}, testNow.Add(time.Second)) {
		t.Errorf("satisfied while a-1-0 is not in the cache")
	}
	p1 := makePod(job, 1).obj()
	if !e.podsSeen(job.UID, []*cachedPod{p1}, testNow.Add(time.Second)) {
		t.Errorf("not satisfied though a-0-0 was seen before and a-1-0 now")
	}
	if !e.podsSeen("other", nil, testNow) {
		t.Errorf("another job's expectations leaked")
	}
}

func TestExpectationsForgetARefusedCreate(t *testing.T) {
	e := newExpectations()
	e.expectCreate("job", "a-0-0", testNow)
	e.createFailed("job", "a-0-0")
	if !e.podsSeen("job", nil, testNow) {
		t.Errorf("a create the API server refused still blocks the job")
	}
}

func TestExpectationsExpireAfterTimeout(t *testing.T) {
	e := newExpectations()
	e.expectCreate("job", "a-0-0", testNow)
	if e.podsSeen("job", nil, testNow.Add(expectationTimeout)) {
		t.Errorf("expired at exactly the timeout")
	}
	if !e.podsSeen("job", nil, testNow.Add(expectationTimeout+time.Second)) {
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
			e := newExpectations()
			if e.jobStale("job", tc.cached) {
				t.Fatalf("stale before any write")
			}
			e.wroteStatus("job", tc.written)
			if got := e.jobStale("job", tc.cached); got != tc.want {
				t.Errorf("jobStale = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExpectationsStopWaitingOnceTheCacheCaughtUp(t *testing.T) {
	e := newExpectations()
	e.wroteStatus("job", "10")
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
	e := newExpectations()
	e.expectCreate("job", "a-0-0", testNow)
	e.wroteStatus("job", "10")
	e.forget("job")
	if !e.podsSeen("job", nil, testNow) || e.jobStale("job", "1") {
		t.Errorf("expectations survived forget")
	}
}
