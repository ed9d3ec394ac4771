package kubectlibj

import (
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(now.Add(-d)) }

// testPod is a pod of index 0 of job "j", attempt 0, built up by options.
func testPod(opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "j-0-0", Namespace: "ns",
		Labels:      map[string]string{ibjv1.CompletionIndexLabel: "0"},
		Annotations: map[string]string{ibjv1.AttemptAnnotation: "0"},
	}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func attempt(n, failures, ignored int) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Name = "j-0-" + strconv.Itoa(n)
		p.Annotations[ibjv1.AttemptAnnotation] = strconv.Itoa(n)
		p.Annotations[ibjv1.IndexFailureCountAnnotation] = strconv.Itoa(failures)
		p.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation] = strconv.Itoa(ignored)
	}
}

// exited ends the pod's container "main" with the code d before now.
func exited(code int32, d time.Duration) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodFailed
		if code == 0 {
			p.Status.Phase = corev1.PodSucceeded
		}
		p.Status.StartTime = ptr.To(ago(d + time.Minute))
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "main",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, FinishedAt: ago(d)}}})
	}
}

// generation sets the pod's restart-attempt label.
func generation(n int) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels[ibjv1.RestartAttemptLabel] = strconv.Itoa(n) }
}

// tracked gives the pod the operator's tracking finalizer.
func tracked(p *corev1.Pod) { p.Finalizers = append(p.Finalizers, ibjv1.TrackingFinalizer) }

func phase(ph corev1.PodPhase) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func withCondition(typ corev1.PodConditionType, reason string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason})
	}
}

func deleted(d time.Duration) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(ago(d)) }
}

func testJob(opts ...func(*ibjv1.IndexedBatchJob)) *ibjv1.IndexedBatchJob {
	j := &ibjv1.IndexedBatchJob{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "ns"}, Spec: ibjv1.IndexedBatchJobSpec{Completions: 1}}
	j.Spec.Template.Spec.Containers = []corev1.Container{{Name: "main"}}
	for _, o := range opts {
		o(j)
	}
	return j
}

func perIndex(limit int32) func(*ibjv1.IndexedBatchJob) {
	return func(j *ibjv1.IndexedBatchJob) { j.Spec.BackoffLimitPerIndex = ptr.To(limit) }
}

func rules(rs ...ibjv1.PodFailurePolicyRule) func(*ibjv1.IndexedBatchJob) {
	return func(j *ibjv1.IndexedBatchJob) { j.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: rs} }
}

// delayed sets a rule's retryDelaySeconds.
func delayed(seconds int32, r ibjv1.PodFailurePolicyRule) ibjv1.PodFailurePolicyRule {
	r.RetryDelaySeconds = ptr.To(seconds)
	return r
}

// named names a rule.
func named(name string, r ibjv1.PodFailurePolicyRule) ibjv1.PodFailurePolicyRule {
	r.Name = name
	return r
}

// restartable gives the job a RestartJob rule on exit code 3 (restarting
// the indexes scope names, "" for the default), maxRestarts 2, and the
// restarts made so far.
func restartable(scope ibjv1.RestartIndexes, restarts int32) func(*ibjv1.IndexedBatchJob) {
	return func(j *ibjv1.IndexedBatchJob) {
		r := exitRule(ibjv1.PodFailurePolicyActionRestartJob, batchv1.PodFailurePolicyOnExitCodesOpIn, 3)
		r.RestartIndexes = scope
		j.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{r}}
		j.Spec.MaxRestarts = ptr.To[int32](2)
		j.Status.Restarts = restarts
	}
}

func ended(typ, reason string, d time.Duration) func(*ibjv1.IndexedBatchJob) {
	return func(j *ibjv1.IndexedBatchJob) {
		j.Status.Conditions = append(j.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, LastTransitionTime: ago(d)})
	}
}

func exitRule(action batchv1.PodFailurePolicyAction, op batchv1.PodFailurePolicyOnExitCodesOperator, codes ...int32) ibjv1.PodFailurePolicyRule {
	return ibjv1.PodFailurePolicyRule{Action: action, OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{Operator: op, Values: codes}}
}

func conditionRule(action batchv1.PodFailurePolicyAction, typ corev1.PodConditionType) ibjv1.PodFailurePolicyRule {
	return ibjv1.PodFailurePolicyRule{Action: action, OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: typ}}}
}

// indexState is the parts of an index's row these tests state.
type indexState struct {
	State       string
	RetryIn     time.Duration
	RetriesLeft *int32
	Reason      string
}

func TestIndexState(t *testing.T) {
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		pods []*corev1.Pod
		want indexState
	}{{
		name: "no pod yet",
		job:  testJob(),
		want: indexState{State: StatePending, Reason: "not started"},
	}, {
		name: "running",
		job:  testJob(),
		pods: []*corev1.Pod{testPod(phase(corev1.PodRunning))},
		want: indexState{State: StateRunning},
	}, {
		name: "failed once with retries left: retrying after 10s from its end",
		job:  testJob(perIndex(2)),
		pods: []*corev1.Pod{testPod(attempt(0, 0, 0), exited(1, 4*time.Second))},
		want: indexState{State: StateRetrying, RetryIn: 6 * time.Second, RetriesLeft: ptr.To[int32](1), Reason: "exit code 1"},
	}, {
		name: "the latest pod is what counts, and the delay doubles per failure",
		job:  testJob(perIndex(3)),
		pods: []*corev1.Pod{
			testPod(attempt(0, 0, 0), exited(1, time.Minute)),
			testPod(attempt(1, 1, 0), exited(1, 5*time.Second)),
		},
		want: indexState{State: StateRetrying, RetryIn: 15 * time.Second, RetriesLeft: ptr.To[int32](1), Reason: "exit code 1"},
	}, {
		name: "over backoffLimitPerIndex: failed before the status says so",
		job:  testJob(perIndex(1)),
		pods: []*corev1.Pod{testPod(attempt(1, 1, 0), exited(1, time.Second))},
		want: indexState{State: StateFailed, RetriesLeft: ptr.To[int32](0), Reason: "exit code 1"},
	}, {
		name: "an Ignore rule on DisruptionTarget uses no retry and is retried at once",
		job:  testJob(perIndex(0), rules(conditionRule(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget))),
		pods: []*corev1.Pod{testPod(attempt(1, 0, 1), exited(137, 0), withCondition(corev1.DisruptionTarget, "EvictionByEvictionAPI"))},
		want: indexState{State: StateRetrying, RetriesLeft: ptr.To[int32](0),
			Reason: "disruption (EvictionByEvictionAPI); rule 0: Ignore"},
	}, {
		name: "a named Ignore rule with a retry delay: retried that long after the pod ended",
		job:  testJob(perIndex(0), rules(delayed(30, named("node_lost", conditionRule(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget))))),
		pods: []*corev1.Pod{testPod(attempt(1, 0, 1), exited(137, 10*time.Second), withCondition(corev1.DisruptionTarget, "EvictionByEvictionAPI"))},
		want: indexState{State: StateRetrying, RetryIn: 20 * time.Second, RetriesLeft: ptr.To[int32](0),
			Reason: `disruption (EvictionByEvictionAPI); rule 0 "node_lost": Ignore`},
	}, {
		name: "a named FailIndex rule gives its reason",
		job:  testJob(perIndex(5), rules(named("bad_input", exitRule(batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyOnExitCodesOpIn, 3)))),
		pods: []*corev1.Pod{testPod(attempt(0, 0, 0), exited(3, 0))},
		want: indexState{State: StateFailed, RetriesLeft: ptr.To[int32](4), Reason: `exit code 3; rule 0 "bad_input": FailIndex (PodFailurePolicy_bad_input)`},
	}, {
		name: "FailIndex fails the index at once",
		job:  testJob(perIndex(5), rules(exitRule(batchv1.PodFailurePolicyActionFailIndex, batchv1.PodFailurePolicyOnExitCodesOpIn, 3))),
		pods: []*corev1.Pod{testPod(attempt(0, 0, 0), exited(3, 0))},
		want: indexState{State: StateFailed, RetriesLeft: ptr.To[int32](4), Reason: "exit code 3; rule 0: FailIndex"},
	}, {
		name: "rules match in order: NotIn passes over the codes it lists",
		job: testJob(rules(
			exitRule(batchv1.PodFailurePolicyActionFailJob, batchv1.PodFailurePolicyOnExitCodesOpNotIn, 1, 2),
			exitRule(batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyOnExitCodesOpIn, 2),
		)),
		pods: []*corev1.Pod{testPod(exited(2, 0))},
		want: indexState{State: StateRetrying, RetryIn: 10 * time.Second, Reason: "exit code 2; rule 1: Count"},
	}, {
		name: "deleted while running is terminating",
		job:  testJob(),
		pods: []*corev1.Pod{testPod(phase(corev1.PodRunning), deleted(time.Second))},
		want: indexState{State: StateTerminating, Reason: "deletion"},
	}, {
		name: "a pod the job's deadline stopped failed with DeadlineExceeded",
		job:  testJob(ended(ibjv1.ConditionFailureTarget, ibjv1.ReasonDeadlineExceeded, time.Minute)),
		pods: []*corev1.Pod{testPod(exited(137, 50*time.Second), deleted(55*time.Second))},
		want: indexState{State: StateFailed, Reason: ibjv1.ReasonDeadlineExceeded},
	}, {
		name: "a pod deleted by a user before the job ended failed by deletion",
		job:  testJob(ended(ibjv1.ConditionFailed, ibjv1.ReasonBackoffLimitExceeded, time.Minute)),
		pods: []*corev1.Pod{testPod(exited(137, 2*time.Minute), deleted(2*time.Minute))},
		want: indexState{State: StateFailed, Reason: "deletion"},
	}, {
		name: "success by policy stops the indexes not done",
		job:  testJob(ended(ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonSuccessPolicy, time.Minute)),
		pods: []*corev1.Pod{testPod(phase(corev1.PodRunning))},
		want: indexState{State: StateStopped, Reason: ibjv1.ReasonSuccessPolicy},
	}, {
		name: "a pod discarded on suspend waits for the resume",
		job:  testJob(func(j *ibjv1.IndexedBatchJob) { j.Spec.Suspend = ptr.To(true) }),
		pods: []*corev1.Pod{testPod(exited(137, 0), func(p *corev1.Pod) { p.Annotations[ibjv1.DiscardedAnnotation] = "true" })},
		want: indexState{State: StatePending, Reason: "stopped without counting (suspend); runs again when the job does"},
	}, {
		name: "the failure a RestartJob rule matched waits for the restart, and names the rule",
		job:  testJob(restartable("", 1)),
		pods: []*corev1.Pod{testPod(generation(0), exited(3, time.Second), tracked)},
		want: indexState{State: StatePending, Reason: "exit code 3; rule 0: RestartJob; restart 1: runs again once every earlier pod has stopped"},
	}, {
		name: "a pod of an earlier generation that the restart deletes is terminating for it",
		job:  testJob(restartable("", 1)),
		pods: []*corev1.Pod{testPod(generation(0), phase(corev1.PodRunning), deleted(time.Second))},
		want: indexState{State: StateTerminating, Reason: "deletion; restart 1: runs again once every earlier pod has stopped"},
	}, {
		name: "a pod of the job's generation runs as any other",
		job:  testJob(restartable("", 1)),
		pods: []*corev1.Pod{testPod(attempt(1, 0, 0), generation(1), phase(corev1.PodRunning))},
		want: indexState{State: StateRunning},
	}, {
		name: "restartIndexes Unfinished keeps a completed index of an earlier generation",
		job:  testJob(restartable(ibjv1.RestartUnfinishedIndexes, 1), func(j *ibjv1.IndexedBatchJob) { j.Status.CompletedIndexes = "0" }),
		pods: []*corev1.Pod{testPod(generation(0), exited(0, time.Minute))},
		want: indexState{State: StateSucceeded},
	}, {
		name: "restartIndexes All runs a succeeded index again",
		job:  testJob(restartable(ibjv1.RestartAllIndexes, 1)),
		pods: []*corev1.Pod{testPod(generation(0), exited(0, time.Minute))},
		want: indexState{State: StatePending, Reason: "restart 1: runs again once every earlier pod has stopped"},
	}, {
		name: "past maxRestarts the RestartJob match fails the job",
		job:  testJob(restartable("", 2), ended(ibjv1.ConditionFailureTarget, ibjv1.ReasonMaxRestartsExceeded, 0)),
		pods: []*corev1.Pod{testPod(generation(2), exited(3, time.Second))},
		want: indexState{State: StateFailed, Reason: "exit code 3; rule 0: RestartJob"},
	}, {
		name: "the job's own retryBackoff",
		job: testJob(perIndex(1), func(j *ibjv1.IndexedBatchJob) {
			j.Spec.RetryBackoff = &ibjv1.RetryBackoff{InitialDelaySeconds: ptr.To[int32](100)}
		}),
		pods: []*corev1.Pod{testPod(attempt(0, 0, 0), exited(1, 0))},
		want: indexState{State: StateRetrying, RetryIn: 100 * time.Second, RetriesLeft: ptr.To[int32](0), Reason: "exit code 1"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scan := newPodScan(tc.job)
			for _, p := range tc.pods {
				scan.add(p)
			}
			s := newJobView(tc.job, scan, now, jobpod.DefaultBackoff).status(0)
			got := indexState{State: s.State, RetriesLeft: s.RetriesLeft, Reason: s.Reason}
			if s.RetryAt != nil {
				got.RetryIn = s.RetryAt.Sub(now)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("index 0 (-want +got):\n%s", diff)
			}
		})
	}
}

func TestJobWideBackoffCountsFailuresSinceTheLastSuccess(t *testing.T) {
	job := testJob(func(j *ibjv1.IndexedBatchJob) { j.Spec.Completions = 3 })
	scan := newPodScan(job)
	for i, p := range []*corev1.Pod{
		testPod(exited(1, 5*time.Minute)),
		testPod(exited(0, 4*time.Minute)),
		testPod(exited(1, 30*time.Second)),
		testPod(exited(1, 10*time.Second)),
	} {
		p.Name = "p" + strconv.Itoa(i)
		p.Labels[ibjv1.CompletionIndexLabel] = strconv.Itoa(i % 3)
		scan.add(p)
	}
	v := newJobView(job, scan, now, jobpod.DefaultBackoff)
	if want := now.Add(-10 * time.Second).Add(20 * time.Second); !v.globalRetryAt.Equal(want) {
		t.Errorf("job-wide retry at %v, want %v (two failures since the success: 20s after the last)", v.globalRetryAt, want)
	}
}

func TestFailedIndexesOfAFailedJobAreThoseThatDidNotSucceed(t *testing.T) {
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want string
	}{
		{"running: only the indexes failed for good", testJob(func(j *ibjv1.IndexedBatchJob) {
			j.Spec.Completions = 5
			j.Status.FailedIndexes = ptr.To("1")
		}), "1"},
		{"failed: every index not completed", testJob(ended(ibjv1.ConditionFailed, ibjv1.ReasonDeadlineExceeded, 0), func(j *ibjv1.IndexedBatchJob) {
			j.Spec.Completions = 5
			j.Status.CompletedIndexes = "0,3"
		}), "1,2,4"},
		{"failed rerun: within its spec.indexes", testJob(ended(ibjv1.ConditionFailed, ibjv1.ReasonFailedIndexes, 0), func(j *ibjv1.IndexedBatchJob) {
			j.Spec.Completions = 8
			j.Spec.Indexes = ptr.To("1,2,6")
			j.Status.CompletedIndexes = "6"
		}), "1,2"},
		{"failed, of the largest completions: the intervals not completed", testJob(ended(ibjv1.ConditionFailed, ibjv1.ReasonDeadlineExceeded, 0), func(j *ibjv1.IndexedBatchJob) {
			j.Spec.Completions = 2147483647
			j.Status.CompletedIndexes = "0,5-9"
			j.Status.FailedIndexes = ptr.To("3")
		}), "1-4,10-2147483646"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := failedIndexes(tc.job).String(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRerunJobKeepsTheSpecAndDropsServerState(t *testing.T) {
	orig := &ibjv1.IndexedBatchJob{
		TypeMeta: metav1.TypeMeta{APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob"},
		ObjectMeta: metav1.ObjectMeta{Name: "net", Namespace: "ns", UID: "u1", ResourceVersion: "7", Generation: 2,
			Labels:          map[string]string{"team": "a"},
			Annotations:     map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}", "note": "x"},
			OwnerReferences: []metav1.OwnerReference{{Name: "owner"}}, Finalizers: []string{"f"}},
		Spec:   ibjv1.IndexedBatchJobSpec{Completions: 4, Network: &ibjv1.Network{EnableDNSHostnames: ptr.To(true)}},
		Status: ibjv1.IndexedBatchJobStatus{Failed: 3, FailedIndexes: ptr.To("2")},
	}
	orig.Spec.Template.Spec.Subdomain = "net"
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(orig)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rerunJob(&unstructured.Unstructured{Object: u}, indexset.Of(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"apiVersion": "batch.indexedjob.dev/v1alpha1", "kind": "IndexedBatchJob",
		"metadata": map[string]any{"namespace": "ns", "labels": map[string]any{"team": "a", RerunOfLabel: "net"},
			"annotations": map[string]any{"note": "x"}},
		"spec": map[string]any{"completions": int64(4), "indexes": "2,3", "network": map[string]any{"enableDNSHostnames": true},
			"template": map[string]any{"metadata": map[string]any{}, "spec": map[string]any{"containers": nil}}},
	}
	if diff := cmp.Diff(want, got.Object); diff != "" {
		t.Errorf("rerun (-want +got):\n%s", diff)
	}
}

func TestIndexRowShowsTheMemoryRaisedAfterOOMKills(t *testing.T) {
	oomJob := testJob(perIndex(3), func(j *ibjv1.IndexedBatchJob) {
		j.Spec.RetryResources = &ibjv1.RetryResources{OnOOMKilled: &ibjv1.OOMKilledResources{FactorPercent: 150, MaxMemory: resource.MustParse("4Gi")}}
	})
	raised := func(p *corev1.Pod) {
		p.Annotations[ibjv1.OOMKillsAnnotation] = "1"
		p.Annotations[ibjv1.MemoryAnnotation] = "main=1536Mi"
	}
	oomKilled := func(p *corev1.Pod) { p.Status.ContainerStatuses[0].State.Terminated.Reason = jobpod.ReasonOOMKilled }
	type row struct {
		Memory   string
		OOMKills *int32
		Reason   string
	}
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		pod  *corev1.Pod
		want row
	}{
		{"a raised pod that was OOM-killed again", oomJob, testPod(attempt(1, 1, 0), raised, exited(137, 0), oomKilled),
			row{Memory: "main=1536Mi", OOMKills: ptr.To[int32](1), Reason: "OOMKilled"}},
		{"a job without onOOMKilled shows no memory", testJob(perIndex(3)), testPod(attempt(1, 1, 0), raised, exited(137, 0), oomKilled),
			row{Reason: "OOMKilled"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scan := newPodScan(tc.job)
			scan.add(tc.pod)
			s := newJobView(tc.job, scan, now, jobpod.DefaultBackoff).status(0)
			if diff := cmp.Diff(tc.want, row{Memory: s.Memory, OOMKills: s.OOMKills, Reason: s.Reason}); diff != "" {
				t.Errorf("index 0 (-want +got):\n%s", diff)
			}
		})
	}
}

// TestIndexRowShowsGenerationAndInPlaceRestarts: a job with maxRestarts
// shows its pods' generation, a job with a rule that retries in place the
// restarts of its pods' containers, each a retry used; a job without them
// shows neither.
func TestIndexRowShowsGenerationAndInPlaceRestarts(t *testing.T) {
	inPlace := func(j *ibjv1.IndexedBatchJob) {
		r := exitRule(batchv1.PodFailurePolicyActionCount, batchv1.PodFailurePolicyOnExitCodesOpIn, 75)
		r.Retry = ibjv1.RetryInPlace
		j.Spec.PodFailurePolicy = &ibjv1.PodFailurePolicy{Rules: []ibjv1.PodFailurePolicyRule{r}}
		j.Spec.Template.Spec.RestartPolicy = corev1.RestartPolicyNever
	}
	restartedTwice := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodRunning
		p.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", RestartCount: 5}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", RestartCount: 2}}
	}
	type row struct{ Generation, InPlaceRestarts, RetriesLeft *int32 }
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want row
	}{
		{"maxRestarts: the generation", testJob(restartable("", 1)), row{Generation: ptr.To[int32](1)}},
		{"retry InPlace: the containers' restarts, not the init containers'", testJob(perIndex(3), inPlace), row{InPlaceRestarts: ptr.To[int32](2), RetriesLeft: ptr.To[int32](1)}},
		{"neither", testJob(perIndex(3)), row{RetriesLeft: ptr.To[int32](3)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			scan := newPodScan(tc.job)
			scan.add(testPod(generation(1), restartedTwice))
			s := newJobView(tc.job, scan, now, jobpod.DefaultBackoff).status(0)
			if diff := cmp.Diff(tc.want, row{Generation: s.Generation, InPlaceRestarts: s.InPlaceRestarts, RetriesLeft: s.RetriesLeft}); diff != "" {
				t.Errorf("index 0 (-want +got):\n%s", diff)
			}
		})
	}
}
