package plugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kubectlibj"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

const (
	minute = time.Minute
	second = time.Second
)

// TestSeedExampleFinished is the seed's per-index example after its run:
// indexes 1 and 2 failed twice each with exit code 1, the others
// succeeded, the job failed with FailedIndexes. It is what docs/kubectl-ibj.md
// shows, and rerun makes a new job of indexes 1 and 2.
func TestSeedExampleFinished(t *testing.T) {
	ns := namespace(t, "seed")
	job := createJob(t, harness.MakeIndexedBatchJob("per-index", ns).Completions(8).Parallelism(2).BackoffLimitPerIndex(1).Obj(),
		ibjv1.IndexedBatchJobStatus{
			Phase:            ibjv1.PhaseFailed,
			StartTime:        ptr.To(at(5 * minute)),
			Succeeded:        6,
			Failed:           4,
			CompletedIndexes: "0,3-7",
			FailedIndexes:    ptr.To("1,2"),
			Conditions: []metav1.Condition{
				condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonFailedIndexes, "Job has failed indexes", 4*minute),
				condition(ibjv1.ConditionFailed, ibjv1.ReasonFailedIndexes, "Job has failed indexes", 4*minute),
			},
		})
	nodes := []string{"kwok-node-0", "kwok-node-1"}
	for ix := range 8 {
		start := 5*minute - time.Duration(ix)*5*second
		if ix == 1 || ix == 2 {
			createPod(t, job, scriptedPod{index: ix, node: nodes[ix%2], phase: corev1.PodFailed, started: start, finished: start - 2*second, exitCode: 1})
			createPod(t, job, scriptedPod{index: ix, attempt: 1, failures: 1, node: nodes[(ix+1)%2], phase: corev1.PodFailed,
				started: start - 20*second, finished: start - 22*second, exitCode: 1})
			continue
		}
		createPod(t, job, scriptedPod{index: ix, node: nodes[ix%2], phase: corev1.PodSucceeded, started: start, finished: start - 2*second})
	}
	createdEvent(t, job, "Created 2 pod(s)", 5*minute)
	createdEvent(t, job, "Created 1 pod(s)", 4*minute+30*second)
	coreEvent(t, job, corev1.EventTypeWarning, "FailedIndexes", "Job has failed indexes", 1, 4*minute, 4*minute)

	checkGolden(t, ns, "seed", []string{
		"indexes = indexes per-index",
		"indexes-failed = indexes per-index --failed --chunk-size 3",
		"indexes-wide = indexes per-index --index 1-3 -o wide",
		"indexes-json = indexes per-index --failed -o json",
		"describe = describe per-index",
		"rerun-dry-run = rerun per-index --failed --dry-run",
		"rerun = rerun per-index --failed",
		"rerun-again = rerun per-index --index 2 -o name",
		"rerun-needs-indexes = rerun per-index",
		"missing-job = indexes nope",
	})

	var rerun ibjv1.IndexedBatchJob
	if err := k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "per-index-rerun-1"}, &rerun); err != nil {
		t.Fatal(err)
	}
	want := job.Spec.DeepCopy()
	want.Indexes = ptr.To("1,2")
	if diff := cmp.Diff(*want, rerun.Spec); diff != "" {
		t.Errorf("the rerun's spec is not the job's with indexes 1,2 (-want +got):\n%s", diff)
	}
	if got := rerun.Labels[kubectlibj.RerunOfLabel]; got != "per-index" {
		t.Errorf("label %s = %q, want per-index", kubectlibj.RerunOfLabel, got)
	}
	if rerun.Status.Phase != "" || len(rerun.Status.Conditions) > 0 || len(rerun.OwnerReferences) > 0 {
		t.Errorf("the rerun carries state of the job it reruns: %+v", rerun)
	}
	golden(t, "seed-describe-rerun", kubectlIBJ(t, ns, "describe", "per-index-rerun-1"))
}

// TestRunningJobWithFailurePolicy is a job in the middle of its run, one
// index in each situation: running, retrying after exit code 1 with no
// retry left, evicted (a named Ignore rule with a retry delay: no retry
// used), failed for good by a named FailIndex rule, not scheduled, deleted
// while running, not started.
func TestRunningJobWithFailurePolicy(t *testing.T) {
	ns := namespace(t, "policies")
	spec := harness.MakeIndexedBatchJob("train", ns).Completions(7).Parallelism(6).BackoffLimitPerIndex(2).
		RetryBackoff(30, 300).PodReplacementPolicy(batchv1.Failed).
		PodFailurePolicy(
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
			harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue),
			harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
		).Obj()
	rules := spec.Spec.PodFailurePolicy.Rules
	rules[1].Name, rules[1].RetryDelaySeconds = "node_lost", ptr.To[int32](60)
	rules[2].Name = "bad_input"
	job := createJob(t, spec,
		ibjv1.IndexedBatchJobStatus{
			Phase:         ibjv1.PhaseRunning,
			StartTime:     ptr.To(at(3 * minute)),
			Active:        2,
			Ready:         ptr.To[int32](1),
			Terminating:   ptr.To[int32](1),
			Failed:        3,
			FailedIndexes: ptr.To("3"),
		})
	const nodeA, nodeB = "node-a", "node-b"
	createPod(t, job, scriptedPod{index: 0, node: nodeA, phase: corev1.PodRunning, started: 90 * second})
	createPod(t, job, scriptedPod{index: 1, node: nodeA, phase: corev1.PodFailed, started: 170 * second, finished: 100 * second, exitCode: 1})
	createPod(t, job, scriptedPod{index: 1, attempt: 1, failures: 1, node: nodeB, phase: corev1.PodFailed, started: 60 * second, finished: 10 * second, exitCode: 1})
	createPod(t, job, scriptedPod{index: 2, node: nodeB, phase: corev1.PodFailed, started: 100 * second, finished: 5 * second, exitCode: 137,
		conditions: disrupted(6 * second)})
	createPod(t, job, scriptedPod{index: 3, node: nodeA, phase: corev1.PodFailed, started: 150 * second, finished: 120 * second, exitCode: 3})
	createPod(t, job, scriptedPod{index: 4, phase: corev1.PodPending, started: 170 * second, waiting: "Unschedulable"})
	createPod(t, job, scriptedPod{index: 5, node: nodeB, phase: corev1.PodRunning, started: 150 * second, deleted: true})
	createdEvent(t, job, "Created 6 pod(s)", 3*minute)

	checkGolden(t, ns, "policies", []string{
		"indexes = indexes train",
		"indexes-wide = indexes train -o wide",
		"indexes-running = indexes train --running",
		"indexes-yaml = indexes train --index 1,2 -o yaml",
		"describe = describe train",
		"rerun-index = rerun train --index 1-2,6 --name train-fix --dry-run=server -o name",
	})
}

// TestMemoryRaisedAfterOOMKills: a job with retryResources.onOOMKilled
// whose index 0 was OOM-killed and runs again with 1.5 times the memory;
// -o wide and -o json show each index's memory.
func TestMemoryRaisedAfterOOMKills(t *testing.T) {
	ns := namespace(t, "oom")
	job := createJob(t, harness.MakeIndexedBatchJob("oom", ns).Completions(2).Parallelism(2).BackoffLimitPerIndex(3).RetryBackoff(0, 0).
		RetryOnOOMKilled(150, "4Gi").Obj(),
		ibjv1.IndexedBatchJobStatus{
			Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(5 * minute)), Active: 1, Ready: ptr.To[int32](1),
			Succeeded: 1, Failed: 1, CompletedIndexes: "1", FailedIndexes: ptr.To(""),
		})
	createPod(t, job, scriptedPod{index: 0, node: "n", phase: corev1.PodFailed, started: 5 * minute, finished: 4 * minute,
		exitCode: 137, reason: "OOMKilled", memory: "main=1Gi"})
	createPod(t, job, scriptedPod{index: 0, attempt: 1, failures: 1, oomKills: 1, node: "n", phase: corev1.PodRunning, started: 4 * minute,
		memory: "main=1536Mi"})
	createPod(t, job, scriptedPod{index: 1, node: "n", phase: corev1.PodSucceeded, started: 5 * minute, finished: 3 * minute, memory: "main=1Gi"})

	checkGolden(t, ns, "oom", []string{
		"indexes-wide = indexes oom -o wide",
		"indexes-json = indexes oom -o json",
	})
}

// TestJobsThatEnded: a FailJob rule's exit code 42, and the deadline (the
// pod it stopped fails with DeadlineExceeded, the index that never ran is
// stopped).
func TestJobsThatEnded(t *testing.T) {
	ns := namespace(t, "ended")
	failJob := createJob(t, harness.MakeIndexedBatchJob("exit42", ns).Completions(2).Parallelism(2).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj(),
		ibjv1.IndexedBatchJobStatus{
			Phase: ibjv1.PhaseFailed, StartTime: ptr.To(at(10 * minute)), Succeeded: 1, Failed: 1, CompletedIndexes: "0",
			Conditions: []metav1.Condition{
				condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonPodFailurePolicy,
					"Container main for pod ended/exit42-1-0 failed with exit code 42 matching FailJob rule at index 0", 8*minute),
				condition(ibjv1.ConditionFailed, ibjv1.ReasonPodFailurePolicy,
					"Container main for pod ended/exit42-1-0 failed with exit code 42 matching FailJob rule at index 0", 8*minute),
			},
		})
	createPod(t, failJob, scriptedPod{index: 0, node: "n", phase: corev1.PodSucceeded, started: 10 * minute, finished: 9 * minute})
	createPod(t, failJob, scriptedPod{index: 1, node: "n", phase: corev1.PodFailed, started: 10 * minute, finished: 8 * minute, exitCode: 42})

	deadline := createJob(t, harness.MakeIndexedBatchJob("deadline", ns).Completions(3).Parallelism(2).ActiveDeadlineSeconds(60).
		TTLSecondsAfterFinished(3600).Obj(),
		ibjv1.IndexedBatchJobStatus{
			Phase: ibjv1.PhaseFailed, StartTime: ptr.To(at(3 * minute)), Succeeded: 1, Failed: 1, CompletedIndexes: "0",
			Conditions: []metav1.Condition{
				condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonDeadlineExceeded, "Job was active longer than specified deadline", 2*minute),
				condition(ibjv1.ConditionFailed, ibjv1.ReasonDeadlineExceeded, "Job was active longer than specified deadline", 2*minute),
			},
		})
	createPod(t, deadline, scriptedPod{index: 0, node: "n", phase: corev1.PodSucceeded, started: 3 * minute, finished: 150 * second})
	createPod(t, deadline, scriptedPod{index: 1, node: "n", phase: corev1.PodFailed, started: 3 * minute, finished: 2 * minute, exitCode: 137, deleted: true})

	checkGolden(t, ns, "ended", []string{
		"exit42-indexes = indexes exit42",
		"deadline-indexes = indexes deadline",
		"deadline-describe = describe deadline",
		"deadline-rerun = rerun deadline --failed --dry-run",
	})
}

// TestWhyAJobDoesNotRun: describe says why no pod runs: the job-wide
// backoff after two failures, pods the API server refuses to create (and
// when the job's createRefusedDelaySeconds lets the operator try again), a
// suspended job queued in Kueue.
func TestWhyAJobDoesNotRun(t *testing.T) {
	ns := namespace(t, "stalled")
	backoff := createJob(t, harness.MakeIndexedBatchJob("backoff", ns).Completions(2).Obj(),
		ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(minute)), Failed: 2})
	createPod(t, backoff, scriptedPod{index: 0, node: "n", phase: corev1.PodFailed, started: 50 * second, finished: 40 * second, exitCode: 2})
	createPod(t, backoff, scriptedPod{index: 0, attempt: 1, node: "n", phase: corev1.PodFailed, started: 20 * second, finished: 5 * second, exitCode: 2})

	quotaSpec := harness.MakeIndexedBatchJob("quota", ns).Completions(4).Parallelism(4).Obj()
	quotaSpec.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To[int32](120)}
	quota := createJob(t, quotaSpec,
		ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(10 * minute)), Succeeded: 1, CompletedIndexes: "0"})
	createPod(t, quota, scriptedPod{index: 0, node: "n", phase: corev1.PodSucceeded, started: 10 * minute, finished: 9 * minute})
	createdEvent(t, quota, "Created 1 pod(s)", 10*minute)
	coreEvent(t, quota, corev1.EventTypeWarning, "FailedCreate",
		`Error creating pod quota-1-0: pods "quota-1-0" is forbidden: exceeded quota: compute, requested: cpu=1, used: cpu=1, limited: cpu=1`,
		7, 9*minute, 30*second)

	suspended := createJob(t, harness.MakeIndexedBatchJob("queued", ns).Completions(4).Suspend(true).Obj(),
		ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseSuspended, Conditions: []metav1.Condition{
			condition(ibjv1.ConditionSuspended, ibjv1.ReasonJobSuspended, "Job suspended", 2*minute),
		}})
	suspended.Labels = map[string]string{"kueue.x-k8s.io/queue-name": "team-a"}
	if err := k8sClient.Update(context.Background(), suspended); err != nil {
		t.Fatal(err)
	}

	checkGolden(t, ns, "stalled", []string{
		"backoff-describe = describe backoff",
		"backoff-indexes = indexes backoff",
		"quota-describe = describe quota",
		"queued-describe = describe queued",
		"describe-namespace = describe",
	})
}

// TestGangScheduling: describe shows a gang job's gang and PodGroup, and
// why it runs no pod where the cluster does not serve the Workload API.
func TestGangScheduling(t *testing.T) {
	ns := namespace(t, "gang")
	running := createJob(t, harness.MakeIndexedBatchJob("train", ns).Completions(8).Parallelism(4).GangScheduling(0).Obj(),
		ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(2 * minute)), Active: 4, Ready: ptr.To[int32](4),
			Conditions: []metav1.Condition{condition(ibjv1.ConditionPodGroupReady, ibjv1.ReasonPodGroupCreated,
				"Workload and PodGroup train-<uid>: the scheduler binds the job's pods only when it can bind 4 at once", 2*minute)}})
	for ix := range 4 {
		createPod(t, running, scriptedPod{index: ix, node: "n", phase: corev1.PodRunning, started: minute})
	}
	notServed := metav1.Condition{Type: ibjv1.ConditionPodGroupReady, Status: metav1.ConditionFalse, Reason: ibjv1.ReasonWorkloadAPINotServed,
		Message: "The cluster does not serve scheduling.k8s.io/v1beta1 Workloads and PodGroups (Kubernetes 1.37 or later with feature gate GenericWorkload and that API version enabled): " +
			"no pod is created until it does. Recreate the job without gangScheduling to run its pods one by one",
		ObservedGeneration: 1, LastTransitionTime: at(3 * minute)}
	held := createJob(t, harness.MakeIndexedBatchJob("held", ns).Completions(4).Parallelism(4).GangScheduling(2).Obj(),
		ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseWorkloadAPINotServed, StartTime: ptr.To(at(3 * minute)), Conditions: []metav1.Condition{notServed}})

	// The PodGroup's name ends with the start of the job's UID, which
	// differs from run to run.
	for _, job := range []*ibjv1.IndexedBatchJob{running, held} {
		t.Run(job.Name+"-describe", func(t *testing.T) {
			out := kubectlIBJ(t, ns, "describe", job.Name)
			golden(t, "gang-"+job.Name+"-describe", strings.ReplaceAll(out, string(job.UID)[:8], "<uid>"))
		})
	}
}

// TestManyIndexesAreSummarised: above 50 indexes the table is a summary;
// indexes whose pods are gone are known from the job's status.
func TestManyIndexesAreSummarised(t *testing.T) {
	ns := namespace(t, "many")
	job := createJob(t, harness.MakeIndexedBatchJob("wide", ns).Completions(60).Parallelism(3).BackoffLimitPerIndex(0).Obj(),
		ibjv1.IndexedBatchJobStatus{
			Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(time.Hour)), Active: 2, Ready: ptr.To[int32](2), Succeeded: 55, Failed: 1,
			CompletedIndexes: "0-49,55-59", FailedIndexes: ptr.To("52"),
		})
	createPod(t, job, scriptedPod{index: 49, node: "n", phase: corev1.PodSucceeded, started: 10 * minute, finished: 5 * minute})
	createPod(t, job, scriptedPod{index: 50, node: "n", phase: corev1.PodRunning, started: 5 * minute})
	createPod(t, job, scriptedPod{index: 51, node: "n", phase: corev1.PodRunning, started: 4 * minute})

	checkGolden(t, ns, "many", []string{
		"indexes = indexes wide",
		"indexes-range = indexes wide --index 48-53",
		"indexes-all = indexes wide --all",
	})
}

// TestTheLargestCompletions is a job of completions 2147483647, which the
// API allows, early in its run: 0-2 and 4 succeeded (only 4's pod is left),
// 3 failed for good, 5 runs, 6 waits to be retried. Every command answers
// with a few rows: the indexes without pods are shown as intervals.
func TestTheLargestCompletions(t *testing.T) {
	ns := namespace(t, "largest")
	job := createJob(t, harness.MakeIndexedBatchJob("huge", ns).Completions(2147483647).Parallelism(3).
		BackoffLimitPerIndex(1).MaxFailedIndexes(10).Obj(),
		ibjv1.IndexedBatchJobStatus{
			Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(10 * minute)), Active: 1, Ready: ptr.To[int32](1), Succeeded: 4, Failed: 3,
			CompletedIndexes: "0-2,4", FailedIndexes: ptr.To("3"),
		})
	createPod(t, job, scriptedPod{index: 4, node: "n", phase: corev1.PodSucceeded, started: 3 * minute, finished: 2 * minute})
	createPod(t, job, scriptedPod{index: 5, node: "n", phase: corev1.PodRunning, started: minute})
	createPod(t, job, scriptedPod{index: 6, node: "n", phase: corev1.PodFailed, started: 40 * second, finished: 4 * second, exitCode: 1})

	checkGolden(t, ns, "largest", []string{
		"indexes = indexes huge",
		"indexes-all = indexes huge --all --chunk-size 2",
		"indexes-failed = indexes huge --failed",
		"indexes-last = indexes huge --index 2147483640-2147483646",
		"indexes-json = indexes huge -o json",
		"describe = describe huge",
	})
}

// TestJobThatRestarts: a job with a RestartJob rule on exit code 3
// (maxRestarts 2) and a rule that retries exit code 75 in place. "group" is
// in the middle of its first restart: index 1 exited with 3, index 0 had
// succeeded and is kept, the pods of indexes 2 and 3 (the latter restarted
// in place once) are being stopped. "group-after" runs its generation 1,
// index 1 restarted in place twice. A job without these fields shows none
// of their columns (the other tests' golden files).
func TestJobThatRestarts(t *testing.T) {
	ns := namespace(t, "restart")
	wrapper := func(name string) *ibjv1.IndexedBatchJob {
		return harness.MakeIndexedBatchJob(name, ns).Completions(4).Parallelism(4).BackoffLimitPerIndex(3).MaxRestarts(2).
			PodFailurePolicy(
				harness.OnExitCodes(ibjv1.PodFailurePolicyActionRestartJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 3),
				harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 75),
			).EditRules(func(rules []ibjv1.PodFailurePolicyRule) {
			rules[1].Name, rules[1].Retry = "flaky", ibjv1.RetryInPlace
		}).Obj()
	}
	restarting := createJob(t, wrapper("group"), ibjv1.IndexedBatchJobStatus{
		Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(5 * minute)), Terminating: ptr.To[int32](2), Succeeded: 1,
		CompletedIndexes: "0", FailedIndexes: ptr.To(""), Restarts: 1,
	})
	createPod(t, restarting, scriptedPod{index: 0, node: "n", phase: corev1.PodSucceeded, started: 5 * minute, finished: 2 * minute})
	createPod(t, restarting, scriptedPod{index: 1, node: "n", phase: corev1.PodFailed, started: 5 * minute, finished: 20 * second, exitCode: 3})
	createPod(t, restarting, scriptedPod{index: 2, node: "n", phase: corev1.PodRunning, started: 5 * minute, deleted: true})
	createPod(t, restarting, scriptedPod{index: 3, node: "n", phase: corev1.PodRunning, started: 5 * minute, restarts: 1, deleted: true})

	after := createJob(t, wrapper("group-after"), ibjv1.IndexedBatchJobStatus{
		Phase: ibjv1.PhaseRunning, StartTime: ptr.To(at(10 * minute)), Active: 3, Ready: ptr.To[int32](3), Succeeded: 1, Failed: 2,
		CompletedIndexes: "0", FailedIndexes: ptr.To(""), Restarts: 1,
	})
	createPod(t, after, scriptedPod{index: 0, node: "n", phase: corev1.PodSucceeded, started: 10 * minute, finished: 8 * minute})
	for ix := 1; ix <= 3; ix++ {
		sp := scriptedPod{index: ix, attempt: 1, generation: 1, node: "n", phase: corev1.PodRunning, started: 4 * minute}
		if ix == 1 {
			sp.restarts = 2
		}
		createPod(t, after, sp)
	}

	checkGolden(t, ns, "restart", []string{
		"indexes = indexes group",
		"describe = describe group",
		"after-indexes = indexes group-after",
		"after-indexes-json = indexes group-after --index 1 -o json",
		"after-describe = describe group-after",
	})
}

// TestNothingToShow: a namespace without jobs, and an output format
// indexes cannot have.
func TestNothingToShow(t *testing.T) {
	ns := namespace(t, "empty")
	checkGolden(t, ns, "empty", []string{
		"describe = describe",
		"indexes-name = indexes any -o name",
	})
}
