package controller

import (
	"fmt"
	"slices"
	"strings"
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
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
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

func TestSucceededPodIsCountedByItsIndexAndReleasedLater(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).Obj()
	done := makePod(job, 1).succeededAt(testNow).obj()

	p := syncOnce(job, makePod(job, 0).running().obj(), done, makePod(job, 2).running().obj())

	if succ, fail := uncounted(p.status); len(succ) != 0 || len(fail) != 0 || p.status.Succeeded != 1 {
		t.Errorf("uncounted = %v/%v, succeeded = %d; want the pod counted by its index, no UID tracked", succ, fail, p.status.Succeeded)
	}
	if p.status.CompletedIndexes != "1" {
		t.Errorf("completedIndexes = %q, want 1", p.status.CompletedIndexes)
	}
	if got := names(p.releaseLater); len(p.removeFinalizer) != 0 || !slices.Equal(got, []string{done.Name}) {
		t.Errorf("removeFinalizer = %v, releaseLater = %v; want [%s] released later", names(p.removeFinalizer), got, done.Name)
	}
	if len(p.create) != 0 {
		t.Errorf("created %v for a completed index", createdIndexes(p))
	}

	// Before the background removal: counted once, released again later.
	job.Status = p.status
	p = syncOnce(job, makePod(job, 0).running().obj(), done, makePod(job, 2).running().obj())
	if p.status.Succeeded != 1 || !slices.Equal(names(p.releaseLater), []string{done.Name}) {
		t.Errorf("succeeded = %d, releaseLater = %v; want 1 and the pod still to release", p.status.Succeeded, names(p.releaseLater))
	}
	// After it, and however often the controller looks again: counted once.
	gone := *done
	gone.Tracked = false
	for range 2 {
		job.Status = p.status
		p = syncOnce(job, makePod(job, 0).running().obj(), &gone, makePod(job, 2).running().obj())
		if p.status.Succeeded != 1 || len(p.releaseLater)+len(p.removeFinalizer) != 0 {
			t.Errorf("succeeded = %d, releases %v %v; want 1 and nothing to release", p.status.Succeeded, names(p.removeFinalizer), names(p.releaseLater))
		}
	}
}

// A succeeded UID in the status (an earlier version's, or a pod's that had
// failures in place) stays until its pod is released, and its pod is
// counted once, by its index.
func TestSucceededUIDsOfAnEarlierVersionAreNotCountedTwice(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).Obj()
	done := makePod(job, 0).succeededAt(testNow).obj()
	job.Status.CompletedIndexes = "0"
	job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{done.UID}}
	p := syncOnce(job, done, makePod(job, 1).running().obj())
	if succ, _ := uncounted(p.status); p.status.Succeeded != 1 || !slices.Equal(succ, []types.UID{done.UID}) || !slices.Equal(names(p.removeFinalizer), []string{done.Name}) {
		t.Errorf("succeeded = %d, uncounted = %v, removeFinalizer = %v; want 1, the UID until released, the pod", p.status.Succeeded, p.status.UncountedTerminatedPods, names(p.removeFinalizer))
	}
	released := *done
	released.Tracked = false
	job.Status = p.status
	p = syncOnce(job, &released, makePod(job, 1).running().obj())
	if p.status.Succeeded != 1 || p.status.Failed != 0 || p.status.UncountedTerminatedPods != nil {
		t.Errorf("succeeded = %d, failed = %d, uncounted = %v; want 1, 0, none", p.status.Succeeded, p.status.Failed, p.status.UncountedTerminatedPods)
	}
}

func TestCountsAreExactAcrossRestartsAndRepeatedSyncs(t *testing.T) {
	// A restart after each step of the apply: the next sync starts from the
	// last written status and must neither lose nor double-count a pod.
	for crashAt := 1; crashAt <= 4; crashAt++ {
		t.Run("crash after step "+string(rune('0'+crashAt)), func(t *testing.T) {
			c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).BackoffLimit(10).Obj())
			c.sync()
			c.succeed(podOfIndex(c, 0))
			c.fail(podOfIndex(c, 1), 1, false)
			c.crashAt = crashAt
			c.sync()
			c.sync()
			c.sync()
			c.advance(time.Minute)
			c.sync()
			for ix := range int32(3) {
				if p := c.podsOfIndex(ix); !jobpod.Read(p[len(p)-1]).Finished() {
					c.succeed(p[len(p)-1])
				}
			}
			for range 4 {
				c.sync()
			}
			st := c.job.Status
			if st.Succeeded != 3 || st.Failed != 1 {
				c.errorf("succeeded/failed = %d/%d, want 3/1", st.Succeeded, st.Failed)
			}
			wantCondition(t, st, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
		})
	}
}

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

func TestIndexPastBackoffLimitPerIndexIsFailedAndNeverRetried(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(3).Parallelism(3).BackoffLimitPerIndex(1).Obj())
	c.sync()
	c.fail(podOfIndex(c, 0), 1, false)
	c.sync()
	c.advance(10 * time.Second)
	p := c.sync()
	if len(p.create) != 1 || p.create[0].Index != 0 || p.create[0].Attempt != 1 || p.create[0].Failures != 1 {
		t.Fatalf("creates = %+v, want index 0 attempt 1 with one failure", p.create)
	}
	c.fail(podOfIndex(c, 0), 1, false)
	p = c.sync()
	if got := ptr.Deref(p.status.FailedIndexes, ""); got != "0" {
		t.Errorf("failedIndexes = %q, want 0", got)
	}
	if currentTarget(&p.status) != nil {
		t.Errorf("job ended while indexes 1 and 2 still run")
	}
	if len(p.delete) != 0 {
		t.Errorf("deleted %v: the other indexes must run on", deletions(p))
	}
	for range 3 {
		c.advance(10 * time.Minute)
		if p = c.sync(); len(p.create) != 0 {
			t.Fatalf("retried a failed index: %+v", p.create)
		}
	}

	c.succeed(podOfIndex(c, 1))
	c.succeed(podOfIndex(c, 2))
	p = c.sync()
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonFailedIndexes)
	p = c.sync()
	wantCondition(t, p.status, ibjv1.ConditionFailed, ibjv1.ReasonFailedIndexes)
	if p.status.CompletedIndexes != "1,2" || *p.status.FailedIndexes != "0" || p.status.Succeeded != 2 || p.status.Failed != 2 {
		t.Errorf("completed %q, failed indexes %q, succeeded %d, failed %d; want 1,2 / 0 / 2 / 2",
			p.status.CompletedIndexes, *p.status.FailedIndexes, p.status.Succeeded, p.status.Failed)
	}
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

func TestIgnoredFailureIsNotCounted(t *testing.T) {
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(1).BackoffLimitPerIndex(0).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj())
	c.sync()
	first := podOfIndex(c, 0)
	c.fail(first, 42, false)
	c.advance(podEventBatchPeriod) // the failure's batched sync

	p := c.sync()
	if p.status.Failed != 0 || p.status.UncountedTerminatedPods != nil || *p.status.FailedIndexes != "" {
		t.Errorf("failed = %d, uncounted = %v, failedIndexes = %q; want the failure ignored",
			p.status.Failed, p.status.UncountedTerminatedPods, *p.status.FailedIndexes)
	}
	// An ignored failure is retried at once: no backoff runs for it.
	if len(p.create) != 1 || p.create[0].Index != 0 || p.create[0].Ignored != 1 || p.create[0].Failures != 0 {
		t.Fatalf("creates = %+v, want index 0 retried with ignored count 1, failures 0", p.create)
	}
	retry := podOfIndex(c, 0)
	if retry.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation] != "1" || retry.Annotations[ibjv1.IndexFailureCountAnnotation] != "0" {
		t.Errorf("retry annotations = %v", retry.Annotations)
	}
	// The ignored pod's finalizer goes once its replacement exists.
	p = c.sync()
	if got := names(p.removeFinalizer); !slices.Equal(got, []string{first.Name}) {
		t.Errorf("removeFinalizer = %v, want [%s]", got, first.Name)
	}

	c.fail(retry, 42, false)
	c.advance(podEventBatchPeriod)
	p = c.sync()
	if len(p.create) != 1 || p.create[0].Ignored != 2 {
		t.Errorf("creates = %+v, want the ignored count at 2", p.create)
	}
	if p.status.Failed != 0 || currentTarget(&p.status) != nil {
		t.Errorf("failed = %d, target = %v: ignored failures must not reach backoffLimitPerIndex 0", p.status.Failed, currentTarget(&p.status))
	}
}

func TestIgnoredFailureWithoutPerIndexBackoffReleasesThePodAtOnce(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(1).BackoffLimit(0).
		PodFailurePolicy(harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue)).Obj()
	evicted := makePod(job, 0).failedAt(testNow.Add(-time.Minute), 137).condition(corev1.DisruptionTarget, corev1.ConditionTrue).obj()
	p := syncOnce(job, evicted)
	if currentTarget(&p.status) != nil || p.status.Failed != 0 || p.status.UncountedTerminatedPods != nil {
		t.Errorf("an ignored eviction counted against backoffLimit 0: %+v", p.status)
	}
	if got := names(p.removeFinalizer); !slices.Equal(got, []string{evicted.Name}) {
		t.Errorf("removeFinalizer = %v", got)
	}
	if len(p.create) != 1 || p.create[0].Index != 0 || p.create[0].Attempt != 1 {
		t.Errorf("creates = %+v, want index 0 replaced", p.create)
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

func TestCompleteWaitsForExpectations(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(1).Obj()
	job.Status.CompletedIndexes = "0"
	job.Status.Succeeded = 1
	job.Status.Conditions = []metav1.Condition{cond(ibjv1.ConditionSuccessCriteriaMet, testNow)}
	p := syncJob(syncInput{job: job, now: testNow, backoff: jobpod.DefaultBackoff})
	wantCondition(t, p.status, ibjv1.ConditionComplete, "")
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

	before := job.Status.DeepCopy()
	p := syncOnce(job, running, stuck, terminating, released)
	if got := deletions(p); len(got) != 1 || !got[running.Name] {
		t.Errorf("deletions = %v, want the running pod deleted with its finalizer stripped", got)
	}
	if got := names(p.removeFinalizer); !slices.Equal(got, names([]*jobpod.Pod{terminating})) {
		t.Errorf("removeFinalizer = %v, want the terminating pod let go at once", got)
	}
	if got := names(p.releaseLater); !slices.Equal(got, names([]*jobpod.Pod{stuck})) {
		t.Errorf("releaseLater = %v, want the finished pod let go when the client has time", got)
	}
	if len(p.create) != 0 || p.status.Succeeded != before.Succeeded || p.status.Failed != before.Failed || p.status.CompletedIndexes != before.CompletedIndexes {
		t.Errorf("a finished job's status changed: %+v", p.status)
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

func TestDeletedFailedPodKeepsItsIndexFailureCount(t *testing.T) {
	// An evicted (deleted) pod goes from the API server once its finalizer
	// does. It carries its index's failure count and backoff: its finalizer
	// stays until the replacement exists.
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).BackoffLimitPerIndex(1).Obj())
	c.sync()
	evicted := podOfIndex(c, 0)
	c.remove(evicted)
	c.advance(podEventBatchPeriod) // the deletion's batched sync

	p := c.sync()
	if _, fail := uncounted(p.status); !slices.Equal(fail, []types.UID{evicted.UID}) {
		t.Errorf("uncounted failed = %v, want the deleted pod recorded at once", fail)
	}
	if slices.Contains(names(p.removeFinalizer), evicted.Name) {
		t.Errorf("released the only pod that carries index 0's failure count")
	}
	if len(p.create) != 0 || p.requeueAfter != 10*time.Second-podEventBatchPeriod {
		t.Errorf("creates = %v, requeueAfter = %v; want the retry after the backoff", createdIndexes(p), p.requeueAfter)
	}
	c.kubelet()
	if c.pod(evicted.UID) == nil {
		t.Fatalf("the evicted pod went while held")
	}

	c.advance(10*time.Second - podEventBatchPeriod)
	p = c.sync()
	if len(p.create) != 1 || p.create[0].Failures != 1 || p.create[0].Attempt != 1 {
		t.Fatalf("creates = %+v, want index 0 retried as attempt 1 with one failure", p.create)
	}
	p = c.sync()
	if !slices.Contains(names(p.removeFinalizer), evicted.Name) {
		t.Errorf("removeFinalizer = %v, want the evicted pod let go once replaced", names(p.removeFinalizer))
	}
	c.kubelet()
	c.sync()
	if c.job.Status.Failed != 1 {
		t.Errorf("failed = %d, want 1", c.job.Status.Failed)
	}

	c.fail(podOfIndex(c, 0), 1, false)
	p = c.sync()
	if got := ptr.Deref(p.status.FailedIndexes, ""); got != "0" {
		t.Errorf("failedIndexes = %q after the second failure with backoffLimitPerIndex 1, want 0", got)
	}
}

func TestPodRecordedFailedStaysAFailureOfItsIndexIfItThenSucceeds(t *testing.T) {
	// Under TerminatingOrFailed a deleted pod is counted failed at once; if
	// it then exits 0 its index has still lost that attempt.
	c := newCluster(t, harness.MakeIndexedBatchJob("a", "ns").Completions(1).BackoffLimitPerIndex(2).Obj())
	c.sync()
	pod := podOfIndex(c, 0)
	c.remove(pod)
	c.sync()
	c.succeed(pod)
	p := c.sync()
	if p.status.CompletedIndexes != "" {
		t.Errorf("completedIndexes = %q: the pod was already counted as failed", p.status.CompletedIndexes)
	}
	c.advance(10 * time.Second)
	p = c.sync()
	if len(p.create) != 1 || p.create[0].Index != 0 || p.create[0].Failures != 1 {
		t.Errorf("creates = %+v, want index 0 retried with one failure", p.create)
	}
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

// A sync reports each index it failed for good, with the reason; how the
// reports become events is event_pace.go's.
func TestSyncReportsEachIndexFailedForGood(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(8).Parallelism(8).BackoffLimitPerIndex(0).Obj()
	var pods []*jobpod.Pod
	for ix := range int32(7) {
		pods = append(pods, makePod(job, ix).failedAt(testNow, 1).obj())
	}
	p := syncOnce(job, pods...)
	var want []string
	for ix := range 7 {
		want = append(want, fmt.Sprintf("Index %d failed for good after 1 attempt: exit code 1 of container main; backoffLimitPerIndex reached", ix))
	}
	if !slices.Equal(p.indexFailures, want) {
		t.Errorf("index failures:\n%s\nwant:\n%s", strings.Join(p.indexFailures, "\n"), strings.Join(want, "\n"))
	}
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

// With terminatingTimeoutSeconds, a pod still terminating that long after
// its deletion deadline (a kubelet that does not answer) is asked to be
// written Failed, and a sync before then comes back at that moment; without
// the field, or under TerminatingOrFailed where the pod is replaced at
// once, nothing is written.
func TestPodsStuckTerminatingAreFailedAfterTheTimeout(t *testing.T) {
	deleted := testNow.Add(-20 * time.Second)
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).PodReplacementPolicy(batchv1.Failed).Obj()
	job.Spec.TerminatingTimeoutSeconds = ptr.To[int32](30)
	stuck := makePod(job, 0).running().deletedAt(deleted).obj()
	running := makePod(job, 1).running().obj()

	p := syncJob(syncInput{job: job, pods: []*jobpod.Pod{stuck, running}, now: testNow, expectationsSatisfied: true})
	if len(p.failStuck) != 0 || p.requeueAfter != 10*time.Second {
		t.Errorf("20 s after deletion: failStuck %v, requeue %v; want none, and a sync 10 s later", names(p.failStuck), p.requeueAfter)
	}
	p = syncJob(syncInput{job: job, pods: []*jobpod.Pod{stuck, running}, now: testNow.Add(10 * time.Second), expectationsSatisfied: true})
	if got := names(p.failStuck); !slices.Equal(got, []string{stuck.Name}) {
		t.Errorf("30 s after deletion: failStuck %v, want %s", got, stuck.Name)
	}
	if len(p.create) != 0 {
		t.Errorf("created %v while the stuck pod is not Failed yet", createdIndexes(p))
	}
	job.Spec.TerminatingTimeoutSeconds = nil
	p = syncJob(syncInput{job: job, pods: []*jobpod.Pod{stuck, running}, now: testNow.Add(time.Hour), expectationsSatisfied: true})
	if len(p.failStuck) != 0 {
		t.Errorf("without terminatingTimeoutSeconds: failStuck %v, want none", names(p.failStuck))
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
