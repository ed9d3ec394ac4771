package controller

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	batchv1 "k8s.io/api/batch/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestSetConditionKeepsTransitionTimeWhenOnlyTheMessageChanges(t *testing.T) {
	st := &ibjv1.IndexedBatchJobStatus{}
	if !setCondition(st, 1, testNow, ibjv1.ConditionSuspended, metav1.ConditionTrue, ibjv1.ReasonJobSuspended, "first") {
		t.Fatalf("a new condition is a change")
	}
	later := testNow.Add(time.Minute)
	if setCondition(st, 2, later, ibjv1.ConditionSuspended, metav1.ConditionTrue, ibjv1.ReasonJobSuspended, "second") {
		t.Errorf("same status reported as a change")
	}
	c := meta.FindStatusCondition(st.Conditions, ibjv1.ConditionSuspended)
	if !c.LastTransitionTime.Time.Equal(testNow) || c.Message != "second" || c.ObservedGeneration != 2 {
		t.Errorf("condition = %+v, want transition time kept, message and generation updated", c)
	}
	if !setCondition(st, 2, later, ibjv1.ConditionSuspended, metav1.ConditionFalse, ibjv1.ReasonJobResumed, "resumed") {
		t.Errorf("True to False not reported as a change")
	}
	if c := meta.FindStatusCondition(st.Conditions, ibjv1.ConditionSuspended); !c.LastTransitionTime.Time.Equal(later) {
		t.Errorf("transition time = %v, want %v", c.LastTransitionTime, later)
	}
}

func TestSetStartTime(t *testing.T) {
	earlier := &metav1.Time{Time: testNow.Add(-time.Hour)}
	cases := []struct {
		name    string
		suspend bool
		st      ibjv1.IndexedBatchJobStatus
		want    ibjv1.IndexedBatchJobStatus
	}{
		{name: "a job that is not suspended has started", want: ibjv1.IndexedBatchJobStatus{StartTime: &metav1.Time{Time: testNow}}},
		{name: "an earlier start is kept", st: ibjv1.IndexedBatchJobStatus{StartTime: earlier}, want: ibjv1.IndexedBatchJobStatus{StartTime: earlier}},
		{name: "a suspended job has not started", suspend: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Suspend(tc.suspend).Obj()
			setStartTime(&tc.st, job, testNow)
			if diff := cmp.Diff(tc.want, tc.st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetSuspendedAndResumed(t *testing.T) {
	started := &metav1.Time{Time: testNow.Add(-time.Hour)}
	suspended := metav1.Condition{Type: ibjv1.ConditionSuspended, Status: metav1.ConditionTrue, Reason: ibjv1.ReasonJobSuspended,
		Message: "Job suspended", ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(testNow)}
	resumed := metav1.Condition{Type: ibjv1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: ibjv1.ReasonJobResumed,
		Message: "Job resumed", ObservedGeneration: 2, LastTransitionTime: metav1.NewTime(testNow)}
	earlierSuspended := suspended
	earlierSuspended.LastTransitionTime = metav1.NewTime(testNow.Add(-time.Minute))
	earlierSuspended.ObservedGeneration = 1
	cases := []struct {
		name        string
		set         func(*ibjv1.IndexedBatchJobStatus, int64, time.Time) bool
		st          ibjv1.IndexedBatchJobStatus
		want        ibjv1.IndexedBatchJobStatus
		wantChanged bool
	}{
		{
			name: "suspending a running job clears its start time", set: setSuspended,
			st:   ibjv1.IndexedBatchJobStatus{StartTime: started},
			want: ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{suspended}}, wantChanged: true,
		},
		{
			name: "suspending again keeps the transition time", set: setSuspended,
			st: ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{earlierSuspended}},
			want: ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{func() metav1.Condition {
				c := earlierSuspended
				c.ObservedGeneration = 2
				return c
			}()}},
		},
		{
			name: "resuming turns Suspended False and resets the start time", set: setResumed,
			st:   ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{earlierSuspended}},
			want: ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{resumed}}, wantChanged: true,
		},
		{
			name: "a job never suspended has nothing to resume", set: setResumed,
			st:   ibjv1.IndexedBatchJobStatus{StartTime: started},
			want: ibjv1.IndexedBatchJobStatus{StartTime: started},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.set(&tc.st, 2, testNow); got != tc.wantChanged {
				t.Errorf("changed = %v, want %v", got, tc.wantChanged)
			}
			if diff := cmp.Diff(tc.want, tc.st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetFinished(t *testing.T) {
	target := func(typ, reason string) *metav1.Condition {
		return &metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "why"}
	}
	final := func(typ, reason string) metav1.Condition {
		return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "why", ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(testNow)}
	}
	cases := []struct {
		name   string
		target *metav1.Condition
		want   ibjv1.IndexedBatchJobStatus
	}{
		{
			name:   "success criteria met become Complete with a completion time",
			target: target(ibjv1.ConditionSuccessCriteriaMet, ibjv1.ReasonSuccessPolicy),
			want: ibjv1.IndexedBatchJobStatus{
				CompletionTime: &metav1.Time{Time: testNow},
				Conditions:     []metav1.Condition{final(ibjv1.ConditionComplete, ibjv1.ReasonSuccessPolicy)},
			},
		},
		{
			name:   "a failure target becomes Failed without a completion time",
			target: target(ibjv1.ConditionFailureTarget, ibjv1.ReasonDeadlineExceeded),
			want:   ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{final(ibjv1.ConditionFailed, ibjv1.ReasonDeadlineExceeded)}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var st ibjv1.IndexedBatchJobStatus
			got := setFinished(&st, 3, testNow, tc.target)
			if diff := cmp.Diff(tc.want, st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(&tc.want.Conditions[0], got); diff != "" {
				t.Errorf("returned condition (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetPodCounts(t *testing.T) {
	var st ibjv1.IndexedBatchJobStatus
	setPodCounts(&st, 3, 2, 1)
	want := ibjv1.IndexedBatchJobStatus{Active: 3, Ready: ptr.To[int32](2), Terminating: ptr.To[int32](1)}
	if diff := cmp.Diff(want, st); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestSetIndexSets(t *testing.T) {
	cases := []struct {
		name              string
		perIndex          bool
		completed, failed []int32
		want              ibjv1.IndexedBatchJobStatus
	}{
		{name: "compressed intervals", perIndex: true, completed: []int32{0, 3, 4, 5, 6, 7}, failed: []int32{1, 2},
			want: ibjv1.IndexedBatchJobStatus{CompletedIndexes: "0,3-7", FailedIndexes: ptr.To("1,2")}},
		{name: "empty failed indexes are written with backoffLimitPerIndex", perIndex: true,
			want: ibjv1.IndexedBatchJobStatus{FailedIndexes: ptr.To("")}},
		{name: "no failedIndexes without backoffLimitPerIndex", completed: []int32{1},
			want: ibjv1.IndexedBatchJobStatus{CompletedIndexes: "1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := harness.MakeIndexedBatchJob("a", "ns").Completions(10)
			if tc.perIndex {
				b = b.BackoffLimitPerIndex(1)
			}
			st := ibjv1.IndexedBatchJobStatus{FailedIndexes: ptr.To("9")}
			setIndexSets(&st, b.Obj(), setOf(tc.completed...), setOf(tc.failed...))
			if diff := cmp.Diff(tc.want, st); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}

func setOf(ixs ...int32) indexset.Set {
	s := indexset.Set{}
	for _, ix := range ixs {
		s = s.Add(ix)
	}
	return s
}

func TestSetUncounted(t *testing.T) {
	cases := []struct {
		name              string
		succeeded, failed []types.UID
		want              *batchv1.UncountedTerminatedPods
	}{
		{name: "nil when empty, so an empty record is not written"},
		{name: "sorted, so an unchanged set is no change", failed: []types.UID{"c", "a", "b"},
			want: &batchv1.UncountedTerminatedPods{Failed: []types.UID{"a", "b", "c"}}},
		{name: "succeeded pods that failed in place, sorted too", succeeded: []types.UID{"z", "y"},
			want: &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"y", "z"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := ibjv1.IndexedBatchJobStatus{UncountedTerminatedPods: &batchv1.UncountedTerminatedPods{
				Succeeded: []types.UID{"from-an-earlier-version"}, Failed: []types.UID{"old"}}}
			setUncounted(&st, sets.New(tc.succeeded...), sets.New(tc.failed...))
			if diff := cmp.Diff(tc.want, st.UncountedTerminatedPods); diff != "" {
				t.Errorf("uncountedTerminatedPods (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetSucceededCountsCompletedIndexes(t *testing.T) {
	st := ibjv1.IndexedBatchJobStatus{Succeeded: 9}
	setSucceeded(&st, setOf(0, 2, 3, 7))
	if st.Succeeded != 4 {
		t.Errorf("succeeded = %d, want 4 (the completed indexes)", st.Succeeded)
	}
}

func TestFinishedAtAndPhase(t *testing.T) {
	completeAt, failedAt := testNow.Add(-time.Hour), testNow.Add(-2*time.Hour)
	cases := []struct {
		name         string
		st           ibjv1.IndexedBatchJobStatus
		wantFinished bool
		wantAt       time.Time
		wantPhase    ibjv1.Phase
	}{
		{"new", ibjv1.IndexedBatchJobStatus{}, false, time.Time{}, ibjv1.PhasePending},
		{"running", ibjv1.IndexedBatchJobStatus{StartTime: &metav1.Time{Time: testNow}}, false, time.Time{}, ibjv1.PhaseRunning},
		{"suspended", ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{cond(ibjv1.ConditionSuspended, testNow)}}, false, time.Time{}, ibjv1.PhaseSuspended},
		{"failure target is not finished", ibjv1.IndexedBatchJobStatus{StartTime: &metav1.Time{Time: testNow}, Conditions: []metav1.Condition{cond(ibjv1.ConditionFailureTarget, testNow)}}, false, time.Time{}, ibjv1.PhaseRunning},
		{"complete uses completionTime", ibjv1.IndexedBatchJobStatus{
			CompletionTime: &metav1.Time{Time: completeAt},
			Conditions:     []metav1.Condition{cond(ibjv1.ConditionSuccessCriteriaMet, testNow), cond(ibjv1.ConditionComplete, testNow)},
		}, true, completeAt, ibjv1.PhaseComplete},
		{"failed uses the condition's time", ibjv1.IndexedBatchJobStatus{
			Conditions: []metav1.Condition{cond(ibjv1.ConditionFailureTarget, testNow), cond(ibjv1.ConditionFailed, failedAt)},
		}, true, failedAt, ibjv1.PhaseFailed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").Obj()
			job.Status = tc.st
			at, ok := finishedAt(job)
			if IsFinished(job) != tc.wantFinished || ok != tc.wantFinished || !at.Equal(tc.wantAt) {
				t.Errorf("IsFinished = %v, finishedAt = %v, %v; want %v, %v", IsFinished(job), at, ok, tc.wantFinished, tc.wantAt)
			}
			st := tc.st
			setPhase(&st)
			if st.Phase != tc.wantPhase {
				t.Errorf("phase = %s, want %s", st.Phase, tc.wantPhase)
			}
		})
	}
}

func cond(typ string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.NewTime(at)}
}

func TestSetPeerDNSReady(t *testing.T) {
	earlier := testNow.Add(-time.Hour)
	condition := func(status metav1.ConditionStatus, reason, message string) func(time.Time, int64) metav1.Condition {
		return func(at time.Time, gen int64) metav1.Condition {
			return metav1.Condition{Type: ibjv1.ConditionPeerDNSReady, Status: status, Reason: reason, Message: message,
				ObservedGeneration: gen, LastTransitionTime: metav1.NewTime(at)}
		}
	}
	ready := condition(metav1.ConditionTrue, ibjv1.ReasonServiceCreated,
		"Headless service workers resolves the pod of index i as tf-<i>.workers")
	taken := condition(metav1.ConditionFalse, ibjv1.ReasonServiceNameTaken,
		"Service workers exists and is not controlled by this job: the operator leaves it unchanged, and tf-<i>.workers resolves "+
			"only if that Service selects the pods. Delete it, or recreate the job with another network.subdomain")
	failed := condition(metav1.ConditionFalse, ibjv1.ReasonServiceCreateFailed,
		`Error creating headless service workers: services "workers" is forbidden: exceeded quota`)
	resumed := metav1.Condition{Type: ibjv1.ConditionSuspended, Status: metav1.ConditionFalse, Reason: ibjv1.ReasonJobResumed,
		LastTransitionTime: metav1.NewTime(earlier)}
	owned := peerService{name: "workers", state: serviceOwned}
	nameTaken := peerService{name: "workers", state: serviceNameTaken}
	createFailed := peerService{name: "workers", state: serviceCreateFailed, err: `services "workers" is forbidden: exceeded quota`}
	cases := []struct {
		name        string
		before      []metav1.Condition
		svc         peerService
		want        []metav1.Condition
		wantChanged *metav1.Condition
	}{
		{
			name: "the first Service created turns it True", svc: owned,
			want: []metav1.Condition{ready(testNow, 2)}, wantChanged: ptr.To(ready(testNow, 2)),
		},
		{
			name:   "still owned: the transition time is kept and nothing is reported",
			before: []metav1.Condition{ready(earlier, 1)}, svc: owned,
			want: []metav1.Condition{ready(earlier, 2)},
		},
		{
			name: "a taken name turns it False", svc: nameTaken,
			want: []metav1.Condition{taken(testNow, 2)}, wantChanged: ptr.To(taken(testNow, 2)),
		},
		{
			name:   "a name still taken is not reported again",
			before: []metav1.Condition{taken(earlier, 2)}, svc: nameTaken,
			want: []metav1.Condition{taken(earlier, 2)},
		},
		{
			name:   "a failed create after a taken name is reported though the condition stays False",
			before: []metav1.Condition{taken(earlier, 2)}, svc: createFailed,
			want: []metav1.Condition{failed(earlier, 2)}, wantChanged: ptr.To(failed(earlier, 2)),
		},
		{
			name:   "other conditions are left alone",
			before: []metav1.Condition{resumed}, svc: owned,
			want: []metav1.Condition{resumed, ready(testNow, 2)}, wantChanged: ptr.To(ready(testNow, 2)),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := &ibjv1.IndexedBatchJobStatus{Conditions: tc.before}
			changed := setPeerDNSReady(st, 2, testNow, "tf", tc.svc)
			if diff := cmp.Diff(tc.want, st.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantChanged, changed); diff != "" {
				t.Errorf("reported change (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSetPodCreation(t *testing.T) {
	started := &metav1.Time{Time: testNow.Add(-time.Hour)}
	quota := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a-1-0",
		errors.New("exceeded quota: compute, requested: cpu=1, used: cpu=1, limited: cpu=1"))
	quotaMessage := `pods "a-1-0" is forbidden: exceeded quota: compute, requested: cpu=1, used: cpu=1, limited: cpu=1`
	psa := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a-0-0",
		errors.New(`violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false`))
	invalid := apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "a-0-0",
		field.ErrorList{field.Invalid(field.NewPath("spec", "containers").Index(0).Child("name"), "Main_1", "a lowercase RFC 1123 label")})
	failing := func(reason, message string, at time.Time) metav1.Condition {
		return metav1.Condition{Type: ibjv1.ConditionPodCreationFailed, Status: metav1.ConditionTrue, Reason: reason,
			Message: message, ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(at)}
	}
	earlier := testNow.Add(-time.Minute)
	suspended := cond(ibjv1.ConditionSuspended, earlier)
	target := cond(ibjv1.ConditionFailureTarget, earlier)
	cases := []struct {
		name      string
		st        ibjv1.IndexedBatchJobStatus
		attempted bool
		pacing    bool
		failure   error
		want      ibjv1.IndexedBatchJobStatus
	}{
		{
			name:      "a full quota: QuotaExceeded with the API server's message, in the phase too",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started},
			attempted: true, failure: fmt.Errorf("creating pod a-1-0: %w", quota),
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseQuotaExceeded,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, testNow)}},
		},
		{
			name:      "Pod Security: PodForbidden",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started},
			attempted: true, failure: psa,
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhasePodForbidden,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonPodForbidden, psa.Error(), testNow)}},
		},
		{
			name:      "an invalid pod: PodInvalid",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started},
			attempted: true, failure: invalid,
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhasePodInvalid,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonPodInvalid, invalid.Error(), testNow)}},
		},
		{
			name:      "an error without an API status: FailedCreate",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started},
			attempted: true, failure: errors.New("connection refused"),
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseFailedCreate,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonFailedCreate, "connection refused", testNow)}},
		},
		{
			name:      "failing again keeps the transition time",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, "older message", earlier)}},
			attempted: true, failure: quota,
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseQuotaExceeded,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, earlier)}},
		},
		{
			name:      "creates that all succeed clear it, and the job is Running",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, earlier)}},
			attempted: true,
			want:      ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseRunning, Conditions: []metav1.Condition{}},
		},
		{
			name: "a sync that creates nothing leaves it",
			st:   ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, earlier)}},
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseQuotaExceeded,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, earlier)}},
		},
		{
			name:      "within a minute of a mutated create, creates as asked for keep PodMutated: a restarted operator paces from it",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonPodMutated, "label removed", earlier)}},
			attempted: true, pacing: true,
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhasePodMutated,
				Conditions: []metav1.Condition{failing(ibjv1.ReasonPodMutated, "label removed", earlier)}},
		},
		{
			name:      "a minute after the last mutated create, creates as asked for clear PodMutated",
			st:        ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonPodMutated, "label removed", earlier)}},
			attempted: true,
			want:      ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseRunning, Conditions: []metav1.Condition{}},
		},
		{
			name: "a minute after the last mutated create, a sync that creates nothing clears PodMutated too",
			st:   ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonPodMutated, "label removed", earlier)}},
			want: ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseRunning, Conditions: []metav1.Condition{}},
		},
		{
			name:   "a suspended job's PodMutated goes, pacing or not",
			st:     ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{failing(ibjv1.ReasonPodMutated, "label removed", earlier), suspended}},
			pacing: true,
			want:   ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseSuspended, Conditions: []metav1.Condition{suspended}},
		},
		{
			name: "a suspended job creates no pods: cleared",
			st:   ibjv1.IndexedBatchJobStatus{Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, earlier), suspended}},
			want: ibjv1.IndexedBatchJobStatus{Phase: ibjv1.PhaseSuspended, Conditions: []metav1.Condition{suspended}},
		},
		{
			name:    "a job whose end is decided: cleared, and a late failure is not recorded",
			st:      ibjv1.IndexedBatchJobStatus{StartTime: started, Conditions: []metav1.Condition{failing(ibjv1.ReasonQuotaExceeded, quotaMessage, earlier), target}},
			failure: quota,
			want:    ibjv1.IndexedBatchJobStatus{StartTime: started, Phase: ibjv1.PhaseRunning, Conditions: []metav1.Condition{target}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := *tc.st.DeepCopy()
			setPodCreation(&st, 3, testNow, tc.attempted, tc.pacing, tc.failure)
			setPhase(&st)
			if diff := cmp.Diff(tc.want, st, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
		})
	}
}
