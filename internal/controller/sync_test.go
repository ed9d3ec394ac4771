package controller

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// syncOnce runs the core at testNow with a cache that is current.
func syncOnce(job *ibjv1.IndexedBatchJob, pods ...*jobpod.Pod) plan {
	return syncJob(syncInput{job: job, pods: pods, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true})
}

func createdIndexes(p plan) []int32 {
	out := []int32{}
	for _, c := range p.create {
		out = append(out, c.Index)
	}
	return out
}

// deletions maps the names of the pods the plan deletes to whether their
// finalizer is stripped first.
func deletions(p plan) map[string]bool {
	out := map[string]bool{}
	for _, d := range p.delete {
		out[d.pod.Name] = d.stripFinalizer
	}
	return out
}

func names(pods []*jobpod.Pod) []string {
	out := []string{}
	for _, p := range pods {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

func uncounted(st ibjv1.IndexedBatchJobStatus) (succeeded, failed []types.UID) {
	if u := st.UncountedTerminatedPods; u != nil {
		return u.Succeeded, u.Failed
	}
	return nil, nil
}

// wantCondition checks a condition is True with the reason, or absent/False with "".
func wantCondition(t *testing.T, st ibjv1.IndexedBatchJobStatus, typ, reason string) {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, typ)
	switch {
	case reason == "" && c != nil && c.Status == metav1.ConditionTrue:
		t.Errorf("condition %s is True (%s: %s), want it absent or False", typ, c.Reason, c.Message)
	case reason != "" && (c == nil || c.Status != metav1.ConditionTrue):
		t.Errorf("condition %s = %+v, want True with reason %s", typ, c, reason)
	case reason != "" && c.Reason != reason:
		t.Errorf("condition %s reason = %s, want %s", typ, c.Reason, reason)
	}
}

func podOfIndex(c *cluster, ix int32) *corev1.Pod {
	pods := c.podsOfIndex(ix)
	if len(pods) == 0 {
		c.t.Fatalf("no pod for index %d\n%s", ix, c.dump())
	}
	return pods[len(pods)-1]
}

// A status that only moves counters waits for the next write within
// statusCounterInterval of the last one; anything a user or a finalizer
// waits on is written at once.
func TestCounterOnlyStatusWaitsForTheNextWrite(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).Obj()
	running := []*jobpod.Pod{makePod(job, 0).running().obj(), makePod(job, 1).running().obj(), makePod(job, 2).running().obj()}
	job.Status = syncOnce(job, running...).status // as written by the sync that started them
	succeeded := makePod(job, 0).succeededAt(testNow).obj()
	failed := makePod(job, 1).failedAt(testNow, 1).obj()
	sync := func(lastWrite time.Time, pods ...*jobpod.Pod) plan {
		return syncJob(syncInput{job: job, pods: pods, now: testNow, backoff: jobpod.DefaultBackoff,
			expectationsSatisfied: true, lastStatusWrite: lastWrite})
	}
	for _, tc := range []struct {
		name      string
		lastWrite time.Time
		pods      []*jobpod.Pod
		want      time.Duration
	}{
		{"a success 200 ms after the last write", testNow.Add(-200 * time.Millisecond), []*jobpod.Pod{succeeded, running[1], running[2]}, 800 * time.Millisecond},
		{"a success 2 s after the last write", testNow.Add(-2 * time.Second), []*jobpod.Pod{succeeded, running[1], running[2]}, 0},
		{"a success with no write by this process", time.Time{}, []*jobpod.Pod{succeeded, running[1], running[2]}, 0},
		{"a failure: recorded at once", testNow.Add(-200 * time.Millisecond), []*jobpod.Pod{running[0], failed, running[2]}, 0},
		{"nothing moved", testNow.Add(-200 * time.Millisecond), running, 0},
		{"the last index done: Complete at once", testNow.Add(-200 * time.Millisecond), []*jobpod.Pod{
			succeeded, makePod(job, 1).succeededAt(testNow).obj(), makePod(job, 2).succeededAt(testNow).obj()}, 0},
	} {
		p := sync(tc.lastWrite, tc.pods...)
		if p.holdStatus != tc.want {
			t.Errorf("%s: holdStatus = %v, want %v", tc.name, p.holdStatus, tc.want)
		}
	}
}

// A job's first status (its startTime, phase Running and counters) waits
// statusCounterInterval from its startTime for the next write, and the
// syncs in between keep that startTime; a first status that says more is
// written at once.
func TestFirstStatusWaitsAMomentFromItsStart(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).Obj()
	start := testNow.Add(-300 * time.Millisecond)
	sync := func(j *ibjv1.IndexedBatchJob, now, heldStart time.Time, pods ...*jobpod.Pod) plan {
		return syncJob(syncInput{job: j, pods: pods, now: now, backoff: jobpod.DefaultBackoff,
			expectationsSatisfied: true, heldStart: heldStart})
	}
	running := []*jobpod.Pod{makePod(job, 0).running().obj(), makePod(job, 1).running().obj()}

	// The sync that starts the job: held for a whole interval.
	p := sync(job, start, time.Time{})
	if len(p.create) != 2 || p.holdStatus != statusCounterInterval || !p.holdStart.Equal(start) || !p.status.StartTime.Equal(&metav1.Time{Time: start}) {
		t.Errorf("first sync: %d creates, holdStatus %v, holdStart %v, startTime %v; want 2, %v, %v, %v",
			len(p.create), p.holdStatus, p.holdStart, p.status.StartTime, statusCounterInterval, start, start)
	}
	for _, tc := range []struct {
		name     string
		now      time.Time
		pods     []*jobpod.Pod
		wantHold time.Duration
	}{
		{"its pods running 300 ms later", testNow, running, 700 * time.Millisecond},
		{"one succeeded 300 ms later", testNow, []*jobpod.Pod{makePod(job, 0).succeededAt(testNow).obj(), running[1]}, 700 * time.Millisecond},
		{"its pods running 1.2 s later", start.Add(1200 * time.Millisecond), running, 0},
		{"one failed: written at once", testNow, []*jobpod.Pod{makePod(job, 0).failedAt(testNow, 1).obj(), running[1]}, 0},
		{"both succeeded: Complete at once", testNow, []*jobpod.Pod{makePod(job, 0).succeededAt(testNow).obj(), makePod(job, 1).succeededAt(testNow).obj()}, 0},
	} {
		p := sync(job, tc.now, start, tc.pods...)
		if p.holdStatus != tc.wantHold {
			t.Errorf("%s: holdStatus = %v, want %v", tc.name, p.holdStatus, tc.wantHold)
		}
		if p.status.StartTime == nil || !p.status.StartTime.Time.Equal(start) {
			t.Errorf("%s: startTime %v, want the held %v", tc.name, p.status.StartTime, start)
		}
		if wantStart := tc.wantHold > 0; !p.holdStart.IsZero() != wantStart {
			t.Errorf("%s: holdStart %v; want it kept: %v", tc.name, p.holdStart, wantStart)
		}
	}

	// A job that has its startTime written, or a suspended one: nothing of
	// firstStatusOnly.
	started := job.DeepCopy()
	started.Status = p.status
	if p := sync(started, testNow, time.Time{}, running...); p.holdStatus != 0 || !p.holdStart.IsZero() {
		t.Errorf("a started job's unchanged status: holdStatus %v, holdStart %v; want neither", p.holdStatus, p.holdStart)
	}
	suspended := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).Suspend(true).Obj()
	if p := sync(suspended, testNow, time.Time{}); p.holdStatus != 0 || p.status.StartTime != nil {
		t.Errorf("a suspended job: holdStatus %v, startTime %v; want neither", p.holdStatus, p.status.StartTime)
	}
}

func TestFirstStatusOnly(t *testing.T) {
	first := ibjv1.IndexedBatchJobStatus{StartTime: &metav1.Time{Time: testNow}, Phase: ibjv1.PhaseRunning, ObservedGeneration: 1, Active: 2}
	for _, tc := range []struct {
		name       string
		prev, next func(*ibjv1.IndexedBatchJobStatus)
		want       bool
	}{
		{"the start", nil, nil, true},
		{"the start and a success", nil, func(st *ibjv1.IndexedBatchJobStatus) { st.Succeeded, st.CompletedIndexes = 1, "0" }, true},
		{"no startTime", nil, func(st *ibjv1.IndexedBatchJobStatus) { st.StartTime = nil }, false},
		{"a startTime written already", func(st *ibjv1.IndexedBatchJobStatus) { st.StartTime = &metav1.Time{Time: testNow} }, nil, false},
		{"a failure", nil, func(st *ibjv1.IndexedBatchJobStatus) { st.Failed = 1 }, false},
		{"a condition", nil, func(st *ibjv1.IndexedBatchJobStatus) {
			st.Conditions = []metav1.Condition{{Type: ibjv1.ConditionComplete, Status: metav1.ConditionTrue}}
		}, false},
		{"uncounted pods", nil, func(st *ibjv1.IndexedBatchJobStatus) {
			st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"u"}}
		}, false},
	} {
		var prev ibjv1.IndexedBatchJobStatus
		next := *first.DeepCopy()
		if tc.prev != nil {
			tc.prev(&prev)
		}
		if tc.next != nil {
			tc.next(&next)
		}
		if got := firstStatusOnly(&prev, &next); got != tc.want {
			t.Errorf("%s: firstStatusOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestOnlyCountersMoved(t *testing.T) {
	base := ibjv1.IndexedBatchJobStatus{Active: 3, Phase: ibjv1.PhaseRunning, StartTime: &metav1.Time{Time: testNow}}
	for _, tc := range []struct {
		name   string
		change func(*ibjv1.IndexedBatchJobStatus)
		want   bool
	}{
		{"unchanged", func(*ibjv1.IndexedBatchJobStatus) {}, false},
		{"pods and indexes counted", func(st *ibjv1.IndexedBatchJobStatus) {
			st.Active, st.Succeeded, st.CompletedIndexes, st.Ready, st.Terminating = 2, 1, "0", ptr.To[int32](2), ptr.To[int32](0)
		}, true},
		{"a failure", func(st *ibjv1.IndexedBatchJobStatus) { st.Failed = 1 }, false},
		{"an uncounted pod", func(st *ibjv1.IndexedBatchJobStatus) {
			st.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{"u"}}
		}, false},
		{"a failed index", func(st *ibjv1.IndexedBatchJobStatus) { st.FailedIndexes = ptr.To("1") }, false},
		{"a condition", func(st *ibjv1.IndexedBatchJobStatus) {
			st.Conditions = []metav1.Condition{{Type: ibjv1.ConditionSuspended, Status: metav1.ConditionTrue}}
		}, false},
		{"the phase", func(st *ibjv1.IndexedBatchJobStatus) { st.Phase = ibjv1.PhaseSuspended }, false},
		{"startTime", func(st *ibjv1.IndexedBatchJobStatus) { st.StartTime = nil }, false},
	} {
		next := *base.DeepCopy()
		tc.change(&next)
		if got := onlyCountersMoved(&base, &next); got != tc.want {
			t.Errorf("%s: onlyCountersMoved = %v, want %v", tc.name, got, tc.want)
		}
	}
}
