package controller

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
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
			job := utils.MakeIndexedBatchJob("a", "ns").Obj()
			job.Status = tc.st
			at, ok := finishedAt(job)
			if IsFinished(job) != tc.wantFinished || ok != tc.wantFinished || !at.Equal(tc.wantAt) {
				t.Errorf("IsFinished = %v, finishedAt = %v, %v; want %v, %v", IsFinished(job), at, ok, tc.wantFinished, tc.wantAt)
			}
			if got := phaseOf(&tc.st); got != tc.wantPhase {
				t.Errorf("phase = %s, want %s", got, tc.wantPhase)
			}
		})
	}
}

func TestUncountedIsSortedAndNilWhenEmpty(t *testing.T) {
	if got := uncountedOf(sets.New[types.UID](), sets.New[types.UID]()); got != nil {
		t.Errorf("uncountedOf(empty) = %+v, want nil so an empty record is not written", got)
	}
	got := uncountedOf(sets.New[types.UID]("c", "a", "b"), sets.New[types.UID]())
	want := &batchv1.UncountedTerminatedPods{Succeeded: []types.UID{"a", "b", "c"}}
	if len(got.Succeeded) != 3 || got.Succeeded[0] != want.Succeeded[0] || got.Succeeded[2] != "c" || got.Failed != nil {
		t.Errorf("uncountedOf = %+v, want %+v", got, want)
	}
}

func cond(typ string, at time.Time) metav1.Condition {
	return metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Test", LastTransitionTime: metav1.NewTime(at)}
}
