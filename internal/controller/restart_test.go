package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// restartingJob has four indexes running at once, exit code 3 restarting
// them together at most maxRestarts times, exit code 4 failing the job.
func restartingJob(maxRestarts int32, scope ibjv1.RestartIndexes) *ibjv1.IndexedBatchJob {
	return harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).BackoffLimit(5).
		PodFailurePolicy(
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 4),
			harness.OnExitCodes(ibjv1.PodFailurePolicyActionRestartJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
		).
		EditRules(func(r []ibjv1.PodFailurePolicyRule) { r[1].RestartIndexes = scope }).
		MaxRestarts(maxRestarts).Obj()
}

// unfinishedPods are the job's pods on the API server that have not
// finished, by name.
func unfinishedPods(c *cluster) []string {
	var out []string
	for _, p := range c.pods {
		if !jobpod.Read(p).Finished() {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// generationOf is the restart-attempt label of the pod.
func generationOf(p *corev1.Pod) string { return p.Labels[ibjv1.RestartAttemptLabel] }

func TestRestartJobStopsEveryPodAndStartsTheNextGenerationOnlyOnceTheyAreGone(t *testing.T) {
	c := newCluster(t, restartingJob(2, ""))
	c.sync()
	for ix := range int32(4) {
		if g := generationOf(podOfIndex(c, ix)); g != "0" {
			t.Fatalf("pod of index %d has generation %q, want 0", ix, g)
		}
	}
	c.succeed(podOfIndex(c, 0))
	c.sync()
	c.fail(podOfIndex(c, 2), 3, false)
	p := c.sync()

	if st := c.job.Status; st.Restarts != 1 || st.Failed != 0 || st.CompletedIndexes != "0" {
		t.Fatalf("after the restart: restarts %d, failed %d, completed %q; want 1, 0, \"0\"", st.Restarts, st.Failed, st.CompletedIndexes)
	}
	if len(p.create) != 0 {
		t.Errorf("created %v while the old generation still runs", createdIndexes(p))
	}
	// Deleted with their finalizers: each stays its index's record until
	// the index's next pod exists.
	if got := deletions(p); len(got) != 2 || got["a-1-0"] || got["a-3-0"] {
		t.Errorf("deleted %v (name: finalizer stripped), want a-1-0 and a-3-0 with their finalizers", got)
	}
	if !slices.ContainsFunc(p.events, func(e event) bool { return e.reason == "Restarting" && strings.Contains(e.message, "Restart 1 of 2") }) {
		t.Errorf("no Restarting event in %+v", p.events)
	}
	// The stopped pods are still terminating: nothing starts.
	c.advance(time.Minute)
	if p := c.sync(); len(p.create) != 0 {
		t.Errorf("created %v while pods %v of the old generation are terminating", createdIndexes(p), unfinishedPods(c))
	}
	c.fail(podOfIndex(c, 1), 137, false)
	if p := c.sync(); len(p.create) != 0 {
		t.Errorf("created %v while pod a-3-0 of the old generation is terminating", createdIndexes(p))
	}
	c.fail(podOfIndex(c, 3), 137, false)
	c.kubelet()
	p = c.sync()
	if got := createdIndexes(p); !slices.Equal(got, []int32{1, 2, 3}) {
		t.Fatalf("the new generation created indexes %v, want 1, 2, 3 (0 completed before the restart)", got)
	}
	for _, ix := range []int32{1, 2, 3} {
		pod := podOfIndex(c, ix)
		if generationOf(pod) != "1" || pod.Name != fmt.Sprintf("a-%d-1", ix) {
			t.Errorf("index %d's new pod %s has generation %q, want a-%d-1 of generation 1", ix, pod.Name, generationOf(pod), ix)
		}
	}
	for _, ix := range []int32{1, 2, 3} {
		c.succeed(podOfIndex(c, ix))
	}
	c.settle()
	st := c.job.Status
	if st.Restarts != 1 || st.Succeeded != 4 || st.Failed != 0 {
		t.Errorf("finished with restarts %d, succeeded %d, failed %d; want 1, 4, 0", st.Restarts, st.Succeeded, st.Failed)
	}
	wantCondition(t, st, ibjv1.ConditionComplete, ibjv1.ReasonCompletionsReached)
}

func TestRestartJobPastMaxRestartsFailsTheJob(t *testing.T) {
	c := newCluster(t, restartingJob(1, ""))
	c.sync()
	c.fail(podOfIndex(c, 0), 3, false)
	c.sync()
	c.settleOldGeneration()
	if st := c.job.Status; st.Restarts != 1 || len(unfinishedPods(c)) != 4 {
		t.Fatalf("restarts %d with pods %v, want 1 restart and four new pods", st.Restarts, unfinishedPods(c))
	}
	c.fail(podOfIndex(c, 1), 3, false)
	c.sync()
	wantCondition(t, c.job.Status, ibjv1.ConditionFailureTarget, ibjv1.ReasonMaxRestartsExceeded)
	c.settle()
	st := c.job.Status
	wantCondition(t, st, ibjv1.ConditionFailed, ibjv1.ReasonMaxRestartsExceeded)
	// The failure past the limit and the three pods the failing job
	// stopped count, as any failing job's; the first failure made the
	// restart and counts only there.
	if st.Restarts != 1 || st.Failed != 4 {
		t.Errorf("restarts %d, failed %d; want 1 and 4", st.Restarts, st.Failed)
	}
}

func TestMaxRestartsZeroFailsAtTheFirstMatch(t *testing.T) {
	c := newCluster(t, restartingJob(0, ""))
	c.sync()
	c.fail(podOfIndex(c, 0), 3, false)
	c.sync()
	wantCondition(t, c.job.Status, ibjv1.ConditionFailureTarget, ibjv1.ReasonMaxRestartsExceeded)
	if c.job.Status.Restarts != 0 {
		t.Errorf("restarts %d, want 0", c.job.Status.Restarts)
	}
}

func TestRestartAllIndexesRunsTheCompletedOnesAgain(t *testing.T) {
	c := newCluster(t, restartingJob(1, ibjv1.RestartAllIndexes))
	c.sync()
	c.succeed(podOfIndex(c, 0))
	c.succeed(podOfIndex(c, 1))
	c.advance(2 * time.Second) // past the status's counter hold
	c.sync()
	if st := c.job.Status; st.Succeeded != 2 {
		t.Fatalf("succeeded %d before the restart, want 2", st.Succeeded)
	}
	c.fail(podOfIndex(c, 3), 3, false)
	c.sync()
	if st := c.job.Status; st.Restarts != 1 || st.Succeeded != 0 || st.CompletedIndexes != "" {
		t.Fatalf("restarts %d, succeeded %d, completed %q; want 1, 0, none", st.Restarts, st.Succeeded, st.CompletedIndexes)
	}
	p := c.settleOldGeneration()
	if got := createdIndexes(p); !slices.Equal(got, []int32{0, 1, 2, 3}) {
		t.Errorf("the new generation created %v, want every index", got)
	}
	c.settle()
	if st := c.job.Status; st.Succeeded != 4 || st.Restarts != 1 {
		t.Errorf("finished with succeeded %d, restarts %d; want 4, 1", st.Succeeded, st.Restarts)
	}
}

// Pods of one generation failing together make one restart, whichever
// syncs see them; a FailJob match among them fails the job instead.
func TestFailuresTogetherMakeOneRestart(t *testing.T) {
	c := newCluster(t, restartingJob(3, ""))
	c.sync()
	c.fail(podOfIndex(c, 0), 3, false)
	c.fail(podOfIndex(c, 1), 3, false)
	c.sync()
	c.fail(podOfIndex(c, 2), 3, false) // after the restart: stopped with its generation
	c.sync()
	c.sync()
	if st := c.job.Status; st.Restarts != 1 || st.Failed != 0 {
		t.Errorf("restarts %d, failed %d; want 1, 0", st.Restarts, st.Failed)
	}

	c = newCluster(t, restartingJob(3, ""))
	c.sync()
	c.fail(podOfIndex(c, 0), 3, false)
	c.fail(podOfIndex(c, 1), 4, false)
	c.sync()
	wantCondition(t, c.job.Status, ibjv1.ConditionFailureTarget, ibjv1.ReasonPodFailurePolicy)
	if c.job.Status.Restarts != 0 {
		t.Errorf("restarted %d times beside a FailJob match", c.job.Status.Restarts)
	}
}

// A restart is decided by the status write that raises status.restarts:
// a crash after any step of that sync's apply leads to exactly one.
func TestRestartIsExactAcrossCrashes(t *testing.T) {
	for crashAt := 1; crashAt <= 5; crashAt++ {
		t.Run(fmt.Sprintf("crash after step %d", crashAt), func(t *testing.T) {
			c := newCluster(t, restartingJob(2, ""))
			c.sync()
			c.succeed(podOfIndex(c, 0))
			c.fail(podOfIndex(c, 1), 3, false)
			c.crashAt = crashAt
			c.sync()
			c.sync()
			c.settleOldGeneration()
			c.settle()
			st := c.job.Status
			if st.Restarts != 1 || st.Succeeded != 4 || st.Failed != 0 {
				c.errorf("restarts %d, succeeded %d, failed %d; want 1, 4, 0", st.Restarts, st.Succeeded, st.Failed)
			}
		})
	}
}

// A template that names a generation cannot make its pods old: the
// operator writes the label.
func TestTemplateGenerationLabelIsOverwritten(t *testing.T) {
	job := restartingJob(1, "")
	job.Spec.Template.Labels = map[string]string{ibjv1.RestartAttemptLabel: "-1"}
	c := newCluster(t, job)
	c.sync()
	if g := generationOf(podOfIndex(c, 0)); g != "0" {
		t.Errorf("generation %q, want 0", g)
	}
}

// settleOldGeneration ends every terminating pod (exit 137), lets the
// kubelet remove them and syncs: the plan is the new generation's start.
func (c *cluster) settleOldGeneration() plan {
	c.t.Helper()
	for _, p := range c.pods {
		if jobpod.Read(p).Terminating() {
			c.fail(p, 137, false)
		}
	}
	c.kubelet()
	c.advance(time.Second)
	return c.sync()
}
