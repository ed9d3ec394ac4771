package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// restartInPlace has the kubelet restart p's first container inside the
// pod after it exited with code, as a container restart rule does.
func (c *cluster) restartInPlace(p *corev1.Pod, code int32) {
	c.t.Helper()
	live := c.unfinished(p)
	if live == nil {
		c.t.Fatalf("pod %s is not there to restart in place", p.Name)
	}
	c.update(live, true, func(pod *corev1.Pod) {
		if pod.Status.Phase != corev1.PodRunning {
			podsim.MarkRunning(pod, c.now)
		}
		podsim.MarkRestartedInPlace(pod, "", code, c.now)
	})
	c.reload(live.Name)
}

// inPlaceJob is a job of one index whose exit code 3 is retried in place,
// with backoffLimitPerIndex perIndex (nil: backoffLimit 2 instead).
func inPlaceJob(perIndex *int32) *ibjv1.IndexedBatchJob {
	w := harness.MakeIndexedBatchJob("a", "ns").Completions(1).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).
		RetryInPlace(0)
	if perIndex != nil {
		w.BackoffLimitPerIndex(*perIndex)
	} else {
		w.BackoffLimit(2)
	}
	return w.Obj()
}

// Every end of a pod that failed in place is counted exactly, whichever
// write of the apply a restart of the operator cuts short (1 deletes, 2
// creates, 3 the status, 4 the finalizer removals; 0 none): its UID in
// uncountedTerminatedPods is written with its failures in place, and only
// a released pod leaves the list.
func TestFailuresInPlaceAreCountedExactlyAcrossRestarts(t *testing.T) {
	type outcome struct {
		failed       int32
		condition    string
		failedIxs    string
		completedIxs string
		pods         int // pods made for the index
	}
	cases := []struct {
		name     string
		perIndex *int32
		// restarts are the exit codes the pod is restarted in place
		// after, then end its exit code (-1: it is left running).
		restarts []int32
		end      int32
		want     outcome
	}{
		{"twice in place, then succeeded", ptr.To[int32](2), []int32{3, 3}, 0,
			outcome{2, ibjv1.ConditionComplete, "", "0", 1}},
		{"three times in place fails the index; the running pod is stopped", ptr.To[int32](2), []int32{3, 3, 3}, -1,
			outcome{3, ibjv1.ConditionFailed, "0", "", 1}},
		{"once in place, then failed: the next pod carries both", ptr.To[int32](2), []int32{3}, 1,
			outcome{2, ibjv1.ConditionComplete, "", "0", 2}},
		{"backoffLimit: the running pod's failures in place, then its stop", nil, []int32{3, 3, 3}, -1,
			outcome{4, ibjv1.ConditionFailed, "", "", 1}},
	}
	for _, tc := range cases {
		for crashAt := 0; crashAt <= 5; crashAt++ {
			t.Run(fmt.Sprintf("%s, crash after step %d", tc.name, crashAt), func(t *testing.T) {
				c := newCluster(t, inPlaceJob(tc.perIndex))
				c.sync()
				pod := podOfIndex(c, 0)
				for _, code := range tc.restarts {
					c.advance(time.Second)
					c.restartInPlace(pod, code)
					c.sync()
				}
				if tc.end >= 0 {
					c.end(pod, tc.end, false)
				}
				c.crashAt = crashAt
				for range 3 {
					c.sync()
				}
				c.kubelet()
				for range 3 {
					c.advance(time.Minute)
					c.sync()
				}
				if pods := c.podsOfIndex(0); len(pods) > 0 && pods[len(pods)-1].UID != pod.UID {
					next := pods[len(pods)-1]
					if got := jobpod.Read(next).Failures; got != 2 {
						c.errorf("the next pod carries %d failures, want 2 (1 in place, 1 its end)", got)
					}
					c.succeed(next)
					for range 3 {
						c.sync()
					}
				}
				c.kubelet()
				c.sync()
				c.releaseInBackground()
				c.sync()
				st := c.job.Status
				got := outcome{st.Failed, "", ptr.Deref(st.FailedIndexes, ""), st.CompletedIndexes, len(c.order)}
				for _, typ := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
					if isTrue(&st, typ) {
						got.condition = typ
					}
				}
				if got != tc.want {
					c.errorf("status = %+v, want %+v", got, tc.want)
				}
				if st.UncountedTerminatedPods != nil {
					c.errorf("uncountedTerminatedPods = %+v at the end", st.UncountedTerminatedPods)
				}
			})
		}
	}
}

// A pod that succeeded after failures in place is recorded by its UID
// too, in the write that adds its failures in place to status.failed, and
// released at once; a sync that sees it again adds nothing.
func TestSucceededPodWithFailuresInPlaceIsRecordedByItsUID(t *testing.T) {
	job := inPlaceJob(ptr.To[int32](2))
	api := makePod(job, 0).succeededAt(testNow).api()
	api.Status.ContainerStatuses[0].RestartCount = 2
	done := jobpod.Read(api)

	p := syncOnce(job, done)
	succ, fail := uncounted(p.status)
	if p.status.Failed != 2 || !slices.Equal(succ, []types.UID{done.UID}) || len(fail) != 0 || p.status.CompletedIndexes != "0" {
		t.Errorf("failed = %d, uncounted = %v/%v, completed = %q; want 2, the pod's UID, 0", p.status.Failed, succ, fail, p.status.CompletedIndexes)
	}
	if !slices.Equal(names(p.removeFinalizer), []string{done.Name}) || len(p.releaseLater) != 0 {
		t.Errorf("removeFinalizer = %v, releaseLater = %v; want the pod released once the status is written", names(p.removeFinalizer), names(p.releaseLater))
	}
	wantCondition(t, p.status, ibjv1.ConditionComplete, "")

	// The status is written, the finalizer not yet: nothing is added.
	job.Status = p.status
	p = syncOnce(job, done)
	if p.status.Failed != 2 {
		t.Errorf("failed = %d after a second look, want 2", p.status.Failed)
	}
	released := *done
	released.Tracked, released.Held = false, false
	job.Status = p.status
	p = syncOnce(job, &released)
	if p.status.Failed != 2 || p.status.UncountedTerminatedPods != nil {
		t.Errorf("failed = %d, uncounted = %v; want 2 and the UID dropped", p.status.Failed, p.status.UncountedTerminatedPods)
	}
	wantCondition(t, p.status, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
}

// A running pod whose failures in place go over backoffLimitPerIndex fails
// its index: recorded as failed, deleted with its finalizer kept until the
// status holds it, and its failures in place less one added at once (its
// UID counts the last).
func TestRunningPodOverItsIndexLimitInPlaceIsRecordedAndStopped(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).Parallelism(2).BackoffLimitPerIndex(1).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).
		RetryInPlace(0).Obj()
	api := makePod(job, 0).running().api()
	api.Status.ContainerStatuses[0].RestartCount = 2
	over := jobpod.Read(api)
	other := makePod(job, 1).running().obj()

	p := syncOnce(job, over, other)
	if _, fail := uncounted(p.status); !slices.Equal(fail, []types.UID{over.UID}) || p.status.Failed != 1 {
		t.Errorf("uncounted failed = %v, failed = %d; want the pod, 1", fail, p.status.Failed)
	}
	if got := deletions(p); len(got) != 1 || got[over.Name] {
		t.Errorf("deletions = %v, want %s deleted with its finalizer kept", got, over.Name)
	}
	if ptr.Deref(p.status.FailedIndexes, "") != "0" || p.status.Active != 1 {
		t.Errorf("failedIndexes = %v, active = %d; want 0, 1", ptr.Deref(p.status.FailedIndexes, ""), p.status.Active)
	}
	if !slices.Equal(names(p.removeFinalizer), []string{over.Name}) {
		t.Errorf("removeFinalizer = %v, want the stopped pod", names(p.removeFinalizer))
	}
	if len(p.indexFailures) != 1 {
		t.Errorf("index failures = %v, want one", p.indexFailures)
	}
	// Under the limit: nothing happens to it.
	api.Status.ContainerStatuses[0].RestartCount = 1
	if p := syncOnce(job, jobpod.Read(api), other); len(p.delete) != 0 || p.status.Failed != 0 || p.status.UncountedTerminatedPods != nil {
		t.Errorf("at the limit: deletions %v, failed %d, uncounted %v; want none", deletions(p), p.status.Failed, p.status.UncountedTerminatedPods)
	}
}

// The running pods' failures in place count against backoffLimit, beside
// the recorded failures; with restartPolicy OnFailure they are upstream's
// restarts instead.
func TestFailuresInPlaceOfRunningPodsCountAgainstBackoffLimit(t *testing.T) {
	job := inPlaceJob(nil) // backoffLimit 2
	job.Spec.Completions, job.Spec.Parallelism = 2, ptr.To[int32](2)
	running := func(ix, restarts int32) *jobpod.Pod {
		api := makePod(job, ix).running().api()
		api.Status.ContainerStatuses[0].RestartCount = restarts
		return jobpod.Read(api)
	}
	if p := syncOnce(job, running(0, 1), running(1, 1)); currentTarget(&p.status) != nil {
		t.Errorf("target set at 2 failures in place with backoffLimit 2")
	}
	job.Status.Failed = 1
	p := syncOnce(job, running(0, 1), running(1, 1))
	wantCondition(t, p.status, ibjv1.ConditionFailureTarget, ibjv1.ReasonBackoffLimitExceeded)
	// Each stopped pod adds its failures in place now, and 1 once released.
	if _, fail := uncounted(p.status); p.status.Failed != 3 || len(fail) != 2 {
		t.Errorf("failed = %d, uncounted failed = %v; want 3 and both pods", p.status.Failed, fail)
	}
}

// The next pod of an index carries the failures its latest pod had in
// place, and waits the backoff they make.
func TestNextPodCarriesTheFailuresInPlace(t *testing.T) {
	job := inPlaceJob(ptr.To[int32](5))
	api := makePod(job, 0).failedAt(testNow, 1).api()
	api.Status.ContainerStatuses[0].RestartCount = 2
	failed := jobpod.Read(api)
	// 3 failures: 10 s, 20 s, then 40 s.
	in := syncInput{job: job, pods: []*jobpod.Pod{failed}, now: testNow.Add(5 * time.Second), backoff: jobpod.DefaultBackoff, expectationsSatisfied: true}
	if p := syncJob(in); len(p.create) != 0 || p.requeueAfter != 35*time.Second {
		t.Errorf("creates %v, requeue %v; want none before the backoff of 3 failures (40s)", createdIndexes(p), p.requeueAfter)
	}
	job.Status.UncountedTerminatedPods = &batchv1.UncountedTerminatedPods{Failed: []types.UID{failed.UID}}
	p := syncJob(syncInput{job: job, pods: []*jobpod.Pod{failed}, now: testNow.Add(time.Minute), backoff: jobpod.DefaultBackoff, expectationsSatisfied: true})
	if len(p.create) != 1 || p.create[0].Failures != 3 {
		t.Errorf("creates = %+v, want one pod carrying 3 failures", p.create)
	}
}
