package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// decision is a plan as a table row states it: the whole status, and the
// pods the plan touches by name.
type decision struct {
	Status ibjv1.IndexedBatchJobStatus
	// Create names the pods to create, with the failure counts they carry.
	Create []string
	// Delete names the pods to delete; "(uncounted)" when their finalizer
	// goes first so their end is not counted.
	Delete          []string
	RemoveFinalizer []string
	Discard         []string
	// ReleaseLater names the pods whose finalizer goes in the background.
	ReleaseLater []string
	// Events are "Type Reason: message".
	Events       []string
	RequeueAfter time.Duration
}

func decisionOf(job *ibjv1.IndexedBatchJob, p plan) decision {
	d := decision{Status: p.status, RequeueAfter: p.requeueAfter}
	for _, c := range p.create {
		create := fmt.Sprintf("%s failures=%d ignored=%d", podName(job, c.Index, c.Attempt), c.Failures, c.Ignored)
		if c.OOMKills > 0 {
			create += fmt.Sprintf(" oomKills=%d", c.OOMKills)
		}
		d.Create = append(d.Create, create)
	}
	for _, del := range p.delete {
		name := del.pod.Name
		if del.stripFinalizer {
			name += " (uncounted)"
		}
		d.Delete = append(d.Delete, name)
		if e := del.event; e != nil {
			d.Events = append(d.Events, fmt.Sprintf("%s %s: %s", e.eventType, e.reason, e.message))
		}
	}
	d.RemoveFinalizer = names(p.removeFinalizer)
	d.Discard = names(p.discard)
	d.ReleaseLater = names(p.releaseLater)
	for _, msg := range p.indexFailures {
		d.Events = append(d.Events, "Warning IndexFailed: "+msg)
	}
	for _, r := range p.memoryRaised {
		d.Events = append(d.Events, "Normal MemoryRaised: "+r.message)
	}
	for _, msg := range p.memoryHeldBack {
		d.Events = append(d.Events, "Warning MemoryRaiseHeldBack: "+msg)
	}
	for _, e := range p.events {
		d.Events = append(d.Events, fmt.Sprintf("%s %s: %s", e.eventType, e.reason, e.message))
	}
	return d
}

// syncRow is a row of the tables of syncJob's decisions: a job, its pods,
// what the reconciler found, and the whole decision wanted of one sync.
type syncRow struct {
	name string
	job  *ibjv1.IndexedBatchJob
	pods func(*ibjv1.IndexedBatchJob) []*jobpod.Pod
	// createRefusedAgo is how long ago the API server last refused
	// one of the job's pod creates; zero: it has not.
	createRefusedAgo time.Duration
	// gang is what the reconciler found of the job's PodGroup.
	gang podGroup
	want decision
}

// runSyncRows decides each row once with the indexes' states in a slice and
// once in a map (indexTable): both decide the same.
func runSyncRows(t *testing.T, rows []syncRow) {
	t.Helper()
	for _, sparse := range []bool{false, true} {
		for _, tc := range rows {
			t.Run(fmt.Sprintf("%s/sparse=%v", tc.name, sparse), func(t *testing.T) {
				var pods []*jobpod.Pod
				if tc.pods != nil {
					pods = tc.pods(tc.job)
				}
				in := syncInput{job: tc.job, pods: pods, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true, sparseIndexes: sparse}
				if tc.createRefusedAgo > 0 {
					in.lastCreateRefused = testNow.Add(-tc.createRefusedAgo)
				}
				in.gang = tc.gang
				got := decisionOf(tc.job, syncJob(in))
				if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("decision (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func TestSyncJob(t *testing.T) {
	now := &metav1.Time{Time: testNow}
	// ended is when the rows' failed pods ended when their sync is to act at
	// once: a batch period before it, as the batched sync of a failure comes.
	ended := testNow.Add(-podEventBatchPeriod)
	condition := func(typ, reason, message string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(testNow)}
	}
	base := harness.MakeIndexedBatchJob("a", "ns")
	failJob := base.Clone().Completions(3).Parallelism(3).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 42)).Obj()
	failIndex := base.Clone().Completions(3).Parallelism(3).BackoffLimitPerIndex(5).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 43)).Obj()
	deadline := base.Clone().Completions(3).Parallelism(2).ActiveDeadlineSeconds(60).Obj()
	deadline.Status.StartTime = &metav1.Time{Time: testNow.Add(-61 * time.Second)}
	suspended := base.Clone().Completions(4).Parallelism(3).Suspend(true).ActiveDeadlineSeconds(10).Obj()
	suspended.Status.StartTime = &metav1.Time{Time: testNow.Add(-5 * time.Second)}
	resumed := base.Clone().Completions(2).Parallelism(2).Suspend(false).Obj()
	resumed.Status.StartTime = &metav1.Time{Time: testNow.Add(-2 * time.Hour)}
	resumed.Status.Conditions = []metav1.Condition{cond(ibjv1.ConditionSuspended, testNow.Add(-time.Hour))}
	perIndex := base.Clone().Completions(10).Parallelism(2).BackoffLimitPerIndex(0).Obj()
	maxFailed := base.Clone().Completions(4).Parallelism(4).BackoffLimitPerIndex(0).MaxFailedIndexes(1).Obj()
	unreadable := base.Clone().Completions(3).Parallelism(3).Obj()
	unreadable.Status.CompletedIndexes = "0-"
	completed1 := base.Clone().Completions(8).Parallelism(3).Obj()
	completed1.Status.CompletedIndexes = "1"

	// An elastic job scaled from 8 to 2 (parallelism with it): indexes 0 and
	// 5 completed, 6 failed, 1, 2 and 7 still run.
	scaledDown := base.Clone().Completions(2).Parallelism(2).BackoffLimitPerIndex(0).Obj()
	scaledDown.Status = ibjv1.IndexedBatchJobStatus{StartTime: now, CompletedIndexes: "0,5", FailedIndexes: ptr.To("6"), Succeeded: 2, Failed: 1}
	scaledUp := base.Clone().Completions(4).Parallelism(4).Obj()
	scaledUp.Status = ibjv1.IndexedBatchJobStatus{StartTime: now, CompletedIndexes: "0,1", Succeeded: 2}
	subset := base.Clone().Completions(8).Parallelism(8).BackoffLimitPerIndex(0).Indexes("1,2,6").Obj()
	subsetDone := subset.DeepCopy()
	subsetDone.Status = ibjv1.IndexedBatchJobStatus{StartTime: now, CompletedIndexes: "1,6", FailedIndexes: ptr.To("2"), Succeeded: 2, Failed: 1}
	unreadableSubset := base.Clone().Completions(3).Parallelism(3).Indexes("2-1").Obj()

	// Named rules and retry delays by failure kind.
	namedFailJob := nameRules(failJob.DeepCopy(), "Fatal")
	namedFailIndex := nameRules(failIndex.DeepCopy(), "bad_input")
	disrupted := func(j *ibjv1.IndexedBatchJob, failures int32, ago time.Duration) *jobpod.Pod {
		return makePodFor(j, podbuild.Spec{Attempt: failures, Failures: failures}).failedAt(testNow.Add(-ago), 137).
			condition(corev1.DisruptionTarget, corev1.ConditionTrue).obj()
	}
	ignoreDisruption := base.Clone().Completions(1).BackoffLimitPerIndex(3).
		PodFailurePolicy(harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue)).Obj()
	ignoreDisruptionDelayed := delayRule(ignoreDisruption.DeepCopy(), 0, 30)
	countDelayed := delayRule(base.Clone().Completions(1).BackoffLimitPerIndex(3).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).Obj(), 0, 5)
	refusedDelay := base.Clone().Completions(2).Parallelism(2).Obj()
	refusedDelay.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To[int32](30)}
	refusedCondition := metav1.Condition{Type: ibjv1.ConditionPodCreationFailed, Status: metav1.ConditionTrue, Reason: ibjv1.ReasonQuotaExceeded,
		Message: "exceeded quota", LastTransitionTime: metav1.NewTime(testNow.Add(-time.Minute))}
	refusedDelay.Status = ibjv1.IndexedBatchJobStatus{StartTime: now, Phase: ibjv1.PhaseQuotaExceeded, Conditions: []metav1.Condition{refusedCondition}}
	refusedNoDelay := refusedDelay.DeepCopy()
	refusedNoDelay.Spec.RetryBackoff = nil

	cases := []syncRow{
		{
			name: "a new job starts the lowest indexes up to parallelism",
			job:  base.Clone().Completions(8).Parallelism(3).Obj(),
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 3, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0", "a-2-0 failures=0 ignored=0"},
			},
		},
		{
			name: "active and completed indexes are skipped",
			job:  completed1,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod { return []*jobpod.Pod{makePod(j, 0).ready().obj()} },
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, CompletedIndexes: "1", Succeeded: 1, Ready: ptr.To[int32](1), Terminating: ptr.To[int32](0), Active: 3, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-2-0 failures=0 ignored=0", "a-3-0 failures=0 ignored=0"},
			},
		},
		{
			name: "a FailJob match fails the job naming the pod, and the running pod counts as failed",
			job:  failJob,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).running().obj(), makePod(j, 1).failedAt(ended, 42).obj(), makePod(j, 2).succeededAt(testNow).obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, CompletedIndexes: "2", Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](1), Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonPodFailurePolicy,
						"Container main for pod ns/a-1-0 failed with exit code 42 matching FailJob rule at index 0")},
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-0", "uid-a-1-0"}},
				},
				Delete:          []string{"a-0-0"},
				RemoveFinalizer: []string{"a-0-0", "a-1-0"},
				// Index 2 is counted once the status holds it: its pod's
				// finalizer is off the critical path.
				ReleaseLater: []string{"a-2-0"},
			},
		},
		{
			name: "a FailIndex match fails only its index; an ordinary failure is retried",
			job:  failIndex,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{
					makePod(j, 0).failedAt(testNow.Add(-time.Hour), 43).obj(),
					makePod(j, 1).running().obj(),
					makePod(j, 2).failedAt(testNow.Add(-time.Hour), 1).obj(),
				}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, FailedIndexes: ptr.To("0"), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning,
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-0", "uid-a-2-0"}},
				},
				Create: []string{"a-2-1 failures=1 ignored=0"},
				// Index 2's pod keeps its finalizer until its replacement
				// exists: it carries the index's failure count.
				RemoveFinalizer: []string{"a-0-0"},
				Events: []string{
					"Warning IndexFailed: Index 0 failed for good after 1 attempt: exit code 43 of container main matched rule 0 (FailIndex)",
				},
			},
		},
		{
			name: "past the deadline the job fails and its running pods go",
			job:  deadline,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).running().obj(), makePod(j, 1).succeededAt(testNow).obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: deadline.Status.StartTime, CompletedIndexes: "1", Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](1), Phase: ibjv1.PhaseRunning,
					Conditions:              []metav1.Condition{condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonDeadlineExceeded, "Job was active longer than specified deadline")},
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-0"}},
				},
				Delete:          []string{"a-0-0"},
				RemoveFinalizer: []string{"a-0-0"},
				ReleaseLater:    []string{"a-1-0"},
			},
		},
		{
			name: "suspend deletes active pods without counting them and clears startTime, which stops the deadline",
			job:  suspended,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).running().obj(), makePod(j, 1).obj(), makePod(j, 2).succeededAt(testNow).obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					CompletedIndexes: "2", Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](2), Phase: ibjv1.PhaseSuspended,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionSuspended, ibjv1.ReasonJobSuspended, "Job suspended")},
				},
				Delete:       []string{"a-0-0 (uncounted)", "a-1-0 (uncounted)"},
				ReleaseLater: []string{"a-2-0"},
				Events:       []string{"Normal Suspended: Job suspended"},
			},
		},
		{
			name: "resume turns Suspended False, resets the start time and starts pods",
			job:  resumed,
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{{Type: ibjv1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: ibjv1.ReasonJobResumed,
						Message: "Job resumed", LastTransitionTime: metav1.NewTime(testNow)}},
				},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0"},
				Events: []string{"Normal Resumed: Job resumed"},
			},
		},
		{
			name: "index sets are written as compressed intervals",
			job:  perIndex,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				var pods []*jobpod.Pod
				for _, ix := range []int32{7, 0, 4, 3, 6, 5} {
					pods = append(pods, makePod(j, ix).succeededAt(testNow).obj())
				}
				for _, ix := range []int32{2, 1} {
					pods = append(pods, makePod(j, ix).failedAt(ended, 1).obj())
				}
				return pods
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, CompletedIndexes: "0,3-7", FailedIndexes: ptr.To("1,2"), Succeeded: 6, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning,
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-1-0", "uid-a-2-0"}},
				},
				Create:          []string{"a-8-0 failures=0 ignored=0", "a-9-0 failures=0 ignored=0"},
				RemoveFinalizer: []string{"a-1-0", "a-2-0"},
				ReleaseLater:    []string{"a-0-0", "a-3-0", "a-4-0", "a-5-0", "a-6-0", "a-7-0"},
				Events: []string{
					"Warning IndexFailed: Index 1 failed for good after 1 attempt: exit code 1 of container main; backoffLimitPerIndex reached",
					"Warning IndexFailed: Index 2 failed for good after 1 attempt: exit code 1 of container main; backoffLimitPerIndex reached",
				},
			},
		},
		{
			name: "more failed indexes than maxFailedIndexes fail the job at once",
			job:  maxFailed,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{
					makePod(j, 0).failedAt(ended, 1).obj(), makePod(j, 1).failedAt(testNow, 1).obj(),
					makePod(j, 2).running().obj(), makePod(j, 3).obj(),
				}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, FailedIndexes: ptr.To("0,1"), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](2), Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonMaxFailedIndexesExceeded,
						"Job has exceeded the specified maximal number of failed indexes")},
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-0", "uid-a-1-0", "uid-a-2-0", "uid-a-3-0"}},
				},
				Delete:          []string{"a-2-0", "a-3-0"},
				RemoveFinalizer: []string{"a-0-0", "a-1-0", "a-2-0", "a-3-0"},
				Events: []string{
					"Warning IndexFailed: Index 0 failed for good after 1 attempt: exit code 1 of container main; backoffLimitPerIndex reached",
					"Warning IndexFailed: Index 1 failed for good after 1 attempt: exit code 1 of container main; backoffLimitPerIndex reached",
				},
			},
		},
		{
			name: "an unreadable completedIndexes is rebuilt from the pods, with a warning",
			job:  unreadable,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 1).succeededAt(testNow).withoutFinalizer().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, CompletedIndexes: "1", Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-2-0 failures=0 ignored=0"},
				Events: []string{`Warning InvalidStatus: Ignored unreadable status.completedIndexes "0-": ` + parseError("0-", 3) + "; rebuilt it from the pods"},
			},
		},
		{
			name: "an elastic job scaled down removes the pods of the indexes gone, uncounted, and trims its index sets",
			job:  scaledDown,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{
					makePod(j, 0).succeededAt(testNow).withoutFinalizer().obj(),
					makePod(j, 1).running().obj(),
					makePod(j, 2).running().obj(),
					makePod(j, 7).succeededAt(testNow).obj(),
				}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, CompletedIndexes: "0", FailedIndexes: ptr.To(""), Succeeded: 1, Failed: 1,
					Ready: ptr.To[int32](0), Terminating: ptr.To[int32](1), Active: 1, Phase: ibjv1.PhaseRunning,
				},
				Delete: []string{"a-2-0 (uncounted)", "a-7-0 (uncounted)"},
				Events: []string{
					"Normal IndexRemoved: Deleted pod a-2-0 without counting it: index 2 is not among the job's indexes (completions 2)",
					"Normal IndexRemoved: Deleted pod a-7-0 without counting it: index 7 is not among the job's indexes (completions 2)",
				},
			},
		},
		{
			name: "an elastic job scaled up starts the new indexes",
			job:  scaledUp,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).succeededAt(testNow).withoutFinalizer().obj(), makePod(j, 1).succeededAt(testNow).withoutFinalizer().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, CompletedIndexes: "0,1", Succeeded: 2, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-2-0 failures=0 ignored=0", "a-3-0 failures=0 ignored=0"},
			},
		},
		{
			name: "a job with spec.indexes runs only those, each under its own number",
			job:  subset,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod { return []*jobpod.Pod{makePod(j, 4).running().obj()} },
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, FailedIndexes: ptr.To(""), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](1), Active: 3, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-1-0 failures=0 ignored=0", "a-2-0 failures=0 ignored=0", "a-6-0 failures=0 ignored=0"},
				Delete: []string{"a-4-0 (uncounted)"},
				Events: []string{"Normal IndexRemoved: Deleted pod a-4-0 without counting it: index 4 is not among the job's indexes (completions 8)"},
			},
		},
		{
			name: "a job with spec.indexes fails with FailedIndexes once every listed index finished",
			job:  subsetDone,
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, CompletedIndexes: "1,6", FailedIndexes: ptr.To("2"), Succeeded: 2, Failed: 1,
					Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseFailed,
					Conditions: []metav1.Condition{
						condition(ibjv1.ConditionFailureTarget, ibjv1.ReasonFailedIndexes, "Job has failed indexes"),
						condition(ibjv1.ConditionFailed, ibjv1.ReasonFailedIndexes, "Job has failed indexes"),
					},
				},
				Events: []string{"Warning FailedIndexes: Job has failed indexes"},
			},
		},
		{
			name: "a job with retryBackoff 0 replaces a failed pod at once",
			job:  base.Clone().Completions(1).BackoffLimit(3).RetryBackoff(0, 0).Obj(),
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).failedAt(ended, 1).withoutFinalizer().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 1, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-1 failures=1 ignored=0"},
			},
		},
		{
			name: "a job's retryBackoff replaces the operator's delay",
			job:  base.Clone().Completions(1).BackoffLimit(3).RetryBackoff(30, 60).Obj(),
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).failedAt(testNow.Add(-20*time.Second), 1).withoutFinalizer().obj()}
			},
			want: decision{
				Status:       ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseRunning},
				RequeueAfter: 10 * time.Second,
			},
		},
		{
			name: "a named FailJob rule fails the job with reason PodFailurePolicy_<name> and upstream's message",
			job:  namedFailJob,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).failedAt(ended, 42).obj(), makePod(j, 1).succeededAt(testNow).obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, CompletedIndexes: "1", Succeeded: 1, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseRunning,
					Conditions: []metav1.Condition{condition(ibjv1.ConditionFailureTarget, "PodFailurePolicy_Fatal",
						"Container main for pod ns/a-0-0 failed with exit code 42 matching FailJob rule at index 0")},
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-0"}},
				},
				RemoveFinalizer: []string{"a-0-0"},
				ReleaseLater:    []string{"a-1-0"},
			},
		},
		{
			name: "a named FailIndex rule gives its reason in the IndexFailed event",
			job:  namedFailIndex,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePod(j, 0).failedAt(testNow.Add(-time.Hour), 43).obj(), makePod(j, 1).running().obj(), makePod(j, 2).running().obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, FailedIndexes: ptr.To("0"), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseRunning,
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-0"}},
				},
				RemoveFinalizer: []string{"a-0-0"},
				Events: []string{
					`Warning IndexFailed: Index 0 failed for good after 1 attempt: exit code 43 of container main matched rule 0 "bad_input" (FailIndex): reason PodFailurePolicy_bad_input`,
				},
			},
		},
		{
			// Upstream (since kubernetes#130881) would wait 20 s: the
			// backoff of the index's two failures, the ignored one with it.
			name: "an Ignore rule's failure is retried at once and grows no backoff",
			job:  ignoreDisruption,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{disrupted(j, 1, podEventBatchPeriod)}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, FailedIndexes: ptr.To(""), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 1, Phase: ibjv1.PhaseRunning},
				Create: []string{"a-0-2 failures=1 ignored=1"},
			},
		},
		{
			name: "an Ignore rule's retryDelaySeconds delays its index's next pod, which keeps the finalizer until then",
			job:  ignoreDisruptionDelayed,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod { return []*jobpod.Pod{disrupted(j, 1, 10*time.Second)} },
			want: decision{
				Status:       ibjv1.IndexedBatchJobStatus{StartTime: now, FailedIndexes: ptr.To(""), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseRunning},
				RequeueAfter: 20 * time.Second,
			},
		},
		{
			// The exponential delay of the index's third failure is 40 s.
			name: "a Count rule's retryDelaySeconds replaces the exponential delay, and the failure counts",
			job:  countDelayed,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod {
				return []*jobpod.Pod{makePodFor(j, podbuild.Spec{Attempt: 2, Failures: 2}).failedAt(testNow.Add(-time.Second), 3).obj()}
			},
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{
					StartTime: now, FailedIndexes: ptr.To(""), Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseRunning,
					UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"uid-a-0-2"}},
				},
				RequeueAfter: 4 * time.Second,
			},
		},
		{
			name:             "within createRefusedDelaySeconds of a refused create no pod is created",
			job:              refusedDelay,
			createRefusedAgo: 10 * time.Second,
			want: decision{
				Status:       ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Phase: ibjv1.PhaseQuotaExceeded, Conditions: []metav1.Condition{refusedCondition}},
				RequeueAfter: 20 * time.Second,
			},
		},
		{
			name:             "createRefusedDelaySeconds after a refused create the pods are tried again",
			job:              refusedDelay,
			createRefusedAgo: 30 * time.Second,
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseQuotaExceeded, Conditions: []metav1.Condition{refusedCondition}},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0"},
			},
		},
		{
			name:             "without createRefusedDelaySeconds a refused create holds nothing back",
			job:              refusedNoDelay,
			createRefusedAgo: time.Second,
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 2, Phase: ibjv1.PhaseQuotaExceeded, Conditions: []metav1.Condition{refusedCondition}},
				Create: []string{"a-0-0 failures=0 ignored=0", "a-1-0 failures=0 ignored=0"},
			},
		},
		{
			name: "an unreadable spec.indexes starts nothing, removes nothing and says why",
			job:  unreadableSubset,
			pods: func(j *ibjv1.IndexedBatchJob) []*jobpod.Pod { return []*jobpod.Pod{makePod(j, 1).running().obj()} },
			want: decision{
				Status: ibjv1.IndexedBatchJobStatus{StartTime: now, Ready: ptr.To[int32](0), Terminating: ptr.To[int32](0), Active: 1, Phase: ibjv1.PhaseRunning},
				Events: []string{`Warning InvalidIndexes: Started no pod: spec.indexes "2-1" cannot be read: ` + parseError("2-1", 3)},
			},
		},
	}
	runSyncRows(t, cases)
}

// parseError is the error indexset.Parse gives for s.
func parseError(s string, completions int32) string {
	_, err := indexset.Parse(s, completions)
	return err.Error()
}
