package controller

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestSuccessPolicyDiscardsTerminatingPodsUnderFailedReplacement(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).PodReplacementPolicy(batchv1.Failed).
		SuccessPolicy(harness.SucceededCount(1)).Obj()
	terminating := makePod(job, 2).running().deletedAt(testNow).obj()
	p := syncOnce(job, makePod(job, 0).succeededAt(testNow).obj(), makePod(job, 1).running().obj(), terminating)
	wantCondition(t, p.status, ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonSuccessPolicy)
	if got := names(p.discard); !slices.Equal(got, []string{terminating.Name}) {
		t.Errorf("discard = %v, want the terminating pod let go uncounted", got)
	}
	if _, fail := uncounted(p.status); len(fail) != 0 {
		t.Errorf("uncounted failed = %v", fail)
	}
}

func TestCompleteWaitsForExpectations(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(1).Obj()
	job.Status.CompletedIndexes = "0"
	job.Status.Succeeded = 1
	job.Status.Conditions = []metav1.Condition{cond(ibjv1.ConditionSuccessCriteriaMet, testNow)}
	p := syncJob(syncInput{job: job, now: testNow, backoff: jobpod.DefaultBackoff})
	wantCondition(t, p.status, ibjv1.ConditionComplete, "")
}

func TestCompleteWaitsForPodsWithInvalidIndexToGo(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(1).Obj()
	job.Status.CompletedIndexes = "0"
	job.Status.Succeeded = 1
	job.Status.StartTime = &metav1.Time{Time: testNow}
	stray := makePod(job, 0).label(ibjv1.CompletionIndexLabel, "5").running().deletedAt(testNow).withoutFinalizer().uid("stray").obj()
	stray.Name = "stray"
	done := makePod(job, 0).succeededAt(testNow).withoutFinalizer().obj()

	p := syncOnce(job, done, stray)
	wantCondition(t, p.status, ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonCompletionsReached)
	wantCondition(t, p.status, ibjv1.ConditionComplete, "")
	job.Status = p.status
	wantCondition(t, syncOnce(job, done).status, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
}

func TestFinishedJobIsDeletedOnceTTLPassed(t *testing.T) {
	complete := func(finished time.Time) ibjv1.IndexedBatchJobStatus {
		return ibjv1.IndexedBatchJobStatus{
			CompletionTime: &metav1.Time{Time: finished},
			Conditions:     []metav1.Condition{cond(ibjv1.ConditionSuccessCriteriaMet, finished), cond(ibjv1.ConditionComplete, finished)},
		}
	}
	failed := ibjv1.IndexedBatchJobStatus{
		Conditions: []metav1.Condition{cond(ibjv1.ConditionFailureTarget, testNow), cond(ibjv1.ConditionFailed, testNow.Add(-100*time.Second))},
	}
	cases := []struct {
		name        string
		ttl         *int32
		status      ibjv1.IndexedBatchJobStatus
		wantDelete  bool
		wantRequeue time.Duration
	}{
		{"no ttl", nil, complete(testNow.Add(-time.Hour)), false, 0},
		{"before the ttl", ptr.To[int32](60), complete(testNow.Add(-30 * time.Second)), false, 30 * time.Second},
		{"ttl passed", ptr.To[int32](30), complete(testNow.Add(-30 * time.Second)), true, 0},
		{"ttl 0", ptr.To[int32](0), complete(testNow), true, 0},
		{"failed job, from the Failed condition", ptr.To[int32](100), failed, true, 0},
		{"failed job, before the ttl", ptr.To[int32](160), failed, false, time.Minute},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Obj()
			job.Spec.TTLSecondsAfterFinished = tc.ttl
			job.Status = tc.status
			p := syncOnce(job)
			if p.deleteJob != tc.wantDelete || p.requeueAfter != tc.wantRequeue {
				t.Errorf("deleteJob = %v, requeueAfter = %v; want %v, %v", p.deleteJob, p.requeueAfter, tc.wantDelete, tc.wantRequeue)
			}
		})
	}
}

func TestJobReachingItsEndRequeuesForTTL(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").TTLSecondsAfterFinished(90).Obj()
	job.Status.CompletedIndexes = "0"
	job.Status.Succeeded = 1
	job.Status.StartTime = &metav1.Time{Time: testNow}
	met := cond(ibjv1.ConditionSuccessCriteriaMet, testNow)
	met.Reason = ibjv1.ReasonCompletionsReached
	job.Status.Conditions = []metav1.Condition{met}
	p := syncOnce(job)
	wantCondition(t, p.status, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
	if p.requeueAfter != 90*time.Second {
		t.Errorf("requeueAfter = %v, want 90s", p.requeueAfter)
	}
}

func TestFinishedJobReleasesStrayPods(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).Obj()
	job.Status = ibjv1.IndexedBatchJobStatus{
		Succeeded: 3, Failed: 1, CompletedIndexes: "0-2",
		StartTime:      &metav1.Time{Time: testNow.Add(-time.Hour)},
		CompletionTime: &metav1.Time{Time: testNow.Add(-time.Minute)},
		Conditions:     []metav1.Condition{cond(ibjv1.ConditionSuccessCriteriaMet, testNow), cond(ibjv1.ConditionComplete, testNow)},
	}
	running := makePod(job, 3).running().obj()
	stuck := makePod(job, 2).failedAt(testNow, 1).obj()
	terminating := makePod(job, 1).running().deletedAt(testNow).obj()
	released := makePod(job, 0).succeededAt(testNow).withoutFinalizer().obj()
	// Counted, finished and deleted (pod garbage collection): let go at
	// once, as its deletion waits for it.
	deleted := makePod(job, 0).succeededAt(testNow).deletedAt(testNow).obj()

	before := job.Status.DeepCopy()
	p := syncOnce(job, running, stuck, terminating, released, deleted)
	if got := deletions(p); len(got) != 1 || !got[running.Name] {
		t.Errorf("deletions = %v, want the running pod deleted with its finalizer stripped", got)
	}
	if got := names(p.removeFinalizer); !slices.Equal(got, names([]*jobpod.Pod{terminating, deleted})) {
		t.Errorf("removeFinalizer = %v, want the terminating and the deleted pods let go at once", got)
	}
	if got := names(p.releaseLater); !slices.Equal(got, names([]*jobpod.Pod{stuck})) {
		t.Errorf("releaseLater = %v, want the finished pod let go when the client has time", got)
	}
	if len(p.create) != 0 || p.status.Succeeded != before.Succeeded || p.status.Failed != before.Failed || p.status.CompletedIndexes != before.CompletedIndexes {
		t.Errorf("a finished job's status changed: %+v", p.status)
	}
}
