package controller

import (
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestBackoffLimitExceededFailsJobOnlyOnceEverythingIsAccounted(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(2).BackoffLimit(0).Obj())
	c.sync()
	failed, running := podOfIndex(c, 0), podOfIndex(c, 1)
	c.fail(failed, 1, false)

	p := c.sync()
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonBackoffLimitExceeded)
	wantCondition(t, p.status, ibjv1.ConditionFailed, "")
	if got := deletions(p); len(got) != 1 || got[running.Name] {
		t.Errorf("deletions = %v, want %s deleted and counted as failed, not stripped", got, running.Name)
	}
	if _, fail := uncounted(p.status); len(fail) != 2 {
		t.Errorf("uncounted failed = %v, want the failed and the deleted pod", fail)
	}
	if len(p.create) != 0 {
		t.Errorf("created %v in a failing job", createdIndexes(p))
	}

	// The results are counted, but a pod is still terminating.
	p = c.sync()
	if p.status.Failed != 2 || *p.status.Terminating != 1 {
		t.Errorf("failed = %d, terminating = %d; want 2, 1", p.status.Failed, *p.status.Terminating)
	}
	wantCondition(t, p.status, ibjv1.ConditionFailed, "")

	c.kubelet()
	p = c.sync()
	wantCondition(t, p.status, ibjv1.ConditionFailed, ibjv1.ReasonBackoffLimitExceeded)
	if p.status.Failed != 2 || p.status.Phase != ibjv1.PhaseFailed || p.status.CompletionTime != nil || p.newlyFinished == nil {
		t.Errorf("failed = %d, phase = %s, completionTime = %v, newlyFinished = %v", p.status.Failed, p.status.Phase, p.status.CompletionTime, p.newlyFinished)
	}
	if len(p.events) == 0 || p.events[len(p.events)-1].reason != ibjv1.ReasonBackoffLimitExceeded || p.events[len(p.events)-1].eventType != corev1.EventTypeWarning {
		t.Errorf("events = %+v, want a BackoffLimitExceeded warning", p.events)
	}
}

func TestBackoffLimitCountsFailuresAcrossIndexes(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).BackoffLimit(2).Obj()
	job.Status.Failed = 1
	pods := []*jobpod.Pod{makePod(job, 0).failedAt(testNow, 1).obj(), makePod(job, 1).running().obj()}
	if p := syncOnce(job, pods...); currentTarget(&p.status) != nil {
		t.Errorf("target set at 2 failures with backoffLimit 2")
	}
	pods = append(pods, makePod(job, 2).failedAt(testNow, 1).obj())
	wantCondition(t, syncOnce(job, pods...).status, ibjv1.ConditionFailureTarget, ibjv1.ReasonBackoffLimitExceeded)
}

func TestBackoffLimitPerIndexMakesBackoffLimitUnlimitedByDefault(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(10).Parallelism(10).BackoffLimitPerIndex(5).Obj()
	var pods []*jobpod.Pod
	for ix := range int32(10) {
		pods = append(pods, makePod(job, ix).failedAt(testNow, 1).obj())
	}
	if p := syncOnce(job, pods...); currentTarget(&p.status) != nil {
		t.Errorf("10 failures ended the job: %+v", currentTarget(&p.status))
	}
}

func TestMaxFailedIndexesExceededFailsJobAndDeletesActivePods(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj()
	pods := []*jobpod.Pod{
		makePod(job, 0).failedAt(testNow, 1).obj(),
		makePod(job, 1).running().obj(),
		makePod(job, 2).running().obj(),
		makePod(job, 3).obj(),
	}
	p := syncOnce(job, pods...)
	if currentTarget(&p.status) != nil || *p.status.FailedIndexes != "0" {
		t.Fatalf("one failed index of at most 1 ended the job, or failedIndexes = %q", *p.status.FailedIndexes)
	}

	pods[1] = makePod(job, 1).failedAt(testNow, 1).obj()
	p = syncOnce(job, pods...)
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonMaxFailedIndexesExceeded)
	if got := deletions(p); len(got) != 2 || got["a-2-0"] || got["a-3-0"] {
		t.Errorf("deletions = %v, want a-2-0 and a-3-0 deleted (counted as failed)", got)
	}
	if *p.status.FailedIndexes != "0,1" || len(p.create) != 0 {
		t.Errorf("failedIndexes = %q, creates = %v", *p.status.FailedIndexes, createdIndexes(p))
	}
}

func TestFailJobRuleIsNotCountedBeforeBackoffLimitExceeded(t *testing.T) {
	// A FailJob match wins over the backoff limit in upstream's order.
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).BackoffLimit(0).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj()
	p := syncOnce(job, makePod(job, 0).failedAt(testNow, 1).obj(), makePod(job, 1).failedAt(testNow, 42).obj())
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonPodFailurePolicy)
}

func TestOnFailureContainerRestartsCountAgainstBackoffLimit(t *testing.T) {
	cases := []struct {
		name         string
		backoffLimit int32
		restarts     int32
		perIndex     bool
		wantFail     bool
	}{
		{"below the limit", 3, 2, false, false},
		{"at the limit", 3, 3, false, true},
		{"limit 0, one restart", 0, 1, false, true},
		{"limit 0, no restart", 0, 0, false, false},
		{"unlimited with backoffLimitPerIndex", 0, 50, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).RestartPolicy(corev1.RestartPolicyOnFailure)
			if tc.perIndex {
				w.BackoffLimitPerIndex(1)
			} else {
				w.BackoffLimit(tc.backoffLimit)
			}
			job := w.Obj()
			// Restarts add up over the active pods, init containers included.
			p0 := makePod(job, 0).running().api()
			p0.Status.ContainerStatuses[0].RestartCount = tc.restarts / 2
			p1 := makePod(job, 1).running().api()
			p1.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", RestartCount: tc.restarts - tc.restarts/2}}
			p := syncOnce(job, jobpod.Read(p0), jobpod.Read(p1))
			if got := currentTarget(&p.status) != nil; got != tc.wantFail {
				t.Errorf("job failing = %v, want %v", got, tc.wantFail)
			}
			if tc.wantFail {
				wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonBackoffLimitExceeded)
			}
		})
	}
}

func TestDeadlineExceededFailsJobAndDeletesPods(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(2).ActiveDeadlineSeconds(60).Obj()
	pods := []*jobpod.Pod{makePod(job, 0).running().obj(), makePod(job, 1).succeededAt(testNow).obj()}

	job.Status.StartTime = &metav1.Time{Time: testNow.Add(-40 * time.Second)}
	p := syncOnce(job, pods...)
	if currentTarget(&p.status) != nil || p.requeueAfter != 20*time.Second {
		t.Errorf("target = %v, requeueAfter = %v; want a requeue when the deadline passes", currentTarget(&p.status), p.requeueAfter)
	}

	job.Status.StartTime = &metav1.Time{Time: testNow.Add(-61 * time.Second)}
	p = syncOnce(job, pods...)
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonDeadlineExceeded)
	if got := deletions(p); len(got) != 1 || got["a-0-0"] {
		t.Errorf("deletions = %v, want the running pod deleted", got)
	}
	if len(p.create) != 0 {
		t.Errorf("created %v after the deadline", createdIndexes(p))
	}
}

func TestSuccessPolicyCompletesJobAndStripsLingeringPods(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).
		SuccessPolicy(harness.SucceededIndexes("0")).Obj())
	c.sync()
	c.succeed(podOfIndex(c, 0))
	c.remove(podOfIndex(c, 3)) // already terminating, holding its finalizer

	p := c.sync()
	wantCondition(t, p.status, ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonSuccessPolicy)
	wantCondition(t, p.status, ibjv1.ConditionComplete, "")
	if got := deletions(p); len(got) != 2 || !got["a-1-0"] || !got["a-2-0"] {
		t.Errorf("deletions = %v, want a-1-0 and a-2-0 deleted with their finalizer stripped", got)
	}
	if p.status.Failed != 0 {
		t.Errorf("failed = %d: lingering pods are not failures", p.status.Failed)
	}

	c.sync()
	p = c.sync()
	wantCondition(t, p.status, ibjv1.ConditionComplete, "")
	if *p.status.Terminating == 0 {
		t.Errorf("terminating = 0 while lingering pods still terminate")
	}

	c.kubelet()
	p = c.sync()
	wantCondition(t, p.status, ibjv1.ConditionComplete, ibjv1.ReasonSuccessPolicy)
	if p.status.CompletionTime == nil || p.status.Succeeded != 1 || p.status.Phase != ibjv1.PhaseComplete {
		t.Errorf("completionTime = %v, succeeded = %d, phase = %s", p.status.CompletionTime, p.status.Succeeded, p.status.Phase)
	}
	// Index 3 was deleted before success, under TerminatingOrFailed: a failure.
	if p.status.Failed != 1 {
		t.Errorf("failed = %d, want 1 (the pod deleted before the job succeeded)", p.status.Failed)
	}
}

func TestAllIndexesSucceededCompletesJob(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).Obj()
	job.Status.CompletedIndexes = "0"
	job.Status.Succeeded = 1
	job.Status.StartTime = &metav1.Time{Time: testNow.Add(-time.Hour)}
	// The last index completes the job in the same sync: a succeeded pod
	// is counted by its index, and its finalizer goes after.
	p := syncOnce(job, makePod(job, 0).succeededAt(testNow).withoutFinalizer().obj(), makePod(job, 1).succeededAt(testNow).obj())
	wantCondition(t, p.status, ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonCompletionsReached)
	wantCondition(t, p.status, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
	if got := names(p.releaseLater); !slices.Equal(got, []string{"a-1-0"}) {
		t.Errorf("releaseLater = %v, want [a-1-0]", got)
	}
	if p.status.Succeeded != 2 || !p.status.CompletionTime.Time.Equal(testNow) || !p.status.StartTime.Time.Equal(testNow.Add(-time.Hour)) {
		t.Errorf("succeeded = %d, completionTime = %v, startTime = %v", p.status.Succeeded, p.status.CompletionTime, p.status.StartTime)
	}
}

func TestZeroCompletionsCompletesAtOnce(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(0).Parallelism(3).Obj()
	p := syncOnce(job)
	wantCondition(t, p.status, ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonCompletionsReached)
	wantCondition(t, p.status, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
	if len(p.create) != 0 || p.status.CompletionTime == nil {
		t.Errorf("creates = %v, completionTime = %v", createdIndexes(p), p.status.CompletionTime)
	}
	// As upstream, a finished job has a startTime, never after its completionTime.
	if p.status.StartTime == nil || p.status.StartTime.After(p.status.CompletionTime.Time) {
		t.Errorf("startTime = %v, completionTime = %v", p.status.StartTime, p.status.CompletionTime)
	}
}

func TestJobFailingOnResumeGetsAStartTime(t *testing.T) {
	// Suspended while a pod terminated; resumed; the pod's failure ends the job.
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).BackoffLimit(0).PodReplacementPolicy(batchv1.Failed).Obj()
	job.Status.Conditions = []metav1.Condition{cond(ibjv1.ConditionSuspended, testNow.Add(-time.Hour))}
	p := syncOnce(job, makePod(job, 0).failedAt(testNow, 1).deletedAt(testNow).obj())
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonBackoffLimitExceeded)
	if p.status.StartTime == nil {
		t.Errorf("startTime unset on a job that is running (and failing)")
	}
}
