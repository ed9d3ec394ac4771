package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

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

// A counted pod that someone deletes (kubectl delete, pod garbage
// collection) has its finalizer removed by the sync, not left to the
// background queue: its deletion waits for it.
func TestDeletedCountedPodIsReleasedAtOnce(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).Obj()
	done := makePod(job, 1).succeededAt(testNow).obj()
	p := syncOnce(job, makePod(job, 0).running().obj(), done)
	job.Status = p.status

	deleted := makePod(job, 1).succeededAt(testNow).deletedAt(testNow).obj()
	deleted.UID, deleted.Name = done.UID, done.Name
	p = syncOnce(job, makePod(job, 0).running().obj(), deleted)
	if !slices.Equal(names(p.removeFinalizer), []string{deleted.Name}) || len(p.releaseLater) != 0 {
		t.Errorf("removeFinalizer = %v, releaseLater = %v; want the deleted pod let go at once", names(p.removeFinalizer), names(p.releaseLater))
	}
	if p.status.Succeeded != 1 || p.status.CompletedIndexes != "1" || p.holdStatus != 0 {
		t.Errorf("succeeded = %d, completedIndexes = %q, holdStatus = %v; want the pod counted once and nothing held", p.status.Succeeded, p.status.CompletedIndexes, p.holdStatus)
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
	for crashAt := 1; crashAt <= 5; crashAt++ {
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
