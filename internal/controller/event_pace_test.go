package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func failures(from, to int) []string {
	var out []string
	for ix := from; ix < to; ix++ {
		out = append(out, fmt.Sprintf("Index %d failed for good", ix))
	}
	return out
}

func rendered(evs []event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s: %s", e.eventType, e.reason, e.message))
	}
	return out
}

// A job's pods created and deleted are counted in at most one event per
// countEventInterval; its first indexes failed for good are named, the
// later ones counted in at most one event per moreFailuresInterval; what
// is held goes once its interval is over, or when the job finishes, before
// the job's own events.
func TestPacedEvents(t *testing.T) {
	e := newJobStates()
	t0 := testNow
	more := func(n int, what string) string {
		return fmt.Sprintf("Warning IndexFailed: %d more %s failed for good; `kubectl ibj indexes a --failed` lists them with the reasons", n, what)
	}
	steps := []struct {
		name     string
		at       time.Duration
		created  int
		deleted  int
		failed   []string
		finished bool
		want     []string
		wantWait time.Duration
	}{{
		name: "first sync", created: 10, failed: failures(0, 7),
		want: append(append([]string{"Normal SuccessfulCreate: Created 10 pod(s)"},
			prefixed("Warning IndexFailed: ", failures(0, 5))...), more(2, "indexes")),
	}, {
		name: "within both intervals", at: 4 * time.Second, created: 3, deleted: 2, failed: failures(7, 8),
		want:     []string{"Normal SuccessfulDelete: Deleted 2 pod(s)"},
		wantWait: 6 * time.Second,
	}, {
		name: "the counts' interval over", at: 10 * time.Second, created: 1, deleted: 1,
		want:     []string{"Normal SuccessfulCreate: Created 4 pod(s)"},
		wantWait: 4 * time.Second,
	}, {
		name: "the failures' interval over", at: time.Minute, failed: failures(8, 9),
		want: []string{"Normal SuccessfulDelete: Deleted 1 pod(s)", more(2, "indexes")},
	}, {
		name: "held, then the job finishes", at: time.Minute + time.Second, created: 2, failed: failures(9, 10), finished: true,
		want: []string{"Normal SuccessfulCreate: Created 2 pod(s)", more(1, "index"), "Warning FailedIndexes: done"},
	}}
	for _, step := range steps {
		p := &plan{indexFailures: step.failed, delete: make([]podDeletion, step.deleted)}
		if step.finished {
			c := &metav1.Condition{Type: ibjv1.ConditionFailed, Reason: "FailedIndexes", Message: "done"}
			p.newlyFinished, p.events = c, []event{finishedEvent(c)}
		}
		evs, wait := e.pacedEvents("job", "a", p, step.created, t0.Add(step.at))
		if got := rendered(evs); !slices.Equal(got, step.want) {
			t.Errorf("%s: events\n%s\nwant\n%s", step.name, strings.Join(got, "\n"), strings.Join(step.want, "\n"))
		}
		if wait != step.wantWait {
			t.Errorf("%s: come back in %v, want %v", step.name, wait, step.wantWait)
		}
	}

	// Another job has a pace of its own; a job forgotten starts afresh.
	if evs, _ := e.pacedEvents("other", "b", &plan{}, 1, t0.Add(time.Minute+2*time.Second)); len(evs) != 1 {
		t.Errorf("another job's first create: %v, want its event", rendered(evs))
	}
	e.forget("job")
	if evs, _ := e.pacedEvents("job", "a", &plan{indexFailures: failures(0, 1)}, 0, t0.Add(time.Minute+3*time.Second)); len(evs) != 1 || !strings.HasPrefix(evs[0].message, "Index 0") {
		t.Errorf("a forgotten job's failure: %v, want it named", rendered(evs))
	}
}

// Pods created with memory raised after OOM kills are paced as indexes
// failed for good: the first ones named, the later ones counted in at most
// one event per moreFailuresInterval, each kind on its own, so that a large
// job OOM-killed everywhere does not flood the job's events.
func TestRaisedMemoryEventsArePaced(t *testing.T) {
	e := newJobStates()
	raised := func(from, to int) []raisedPod {
		var out []raisedPod
		for ix := from; ix < to; ix++ {
			out = append(out, raisedPod{pod: fmt.Sprintf("a-%d-1", ix), message: fmt.Sprintf("Pod a-%d-1 raised", ix)})
		}
		return out
	}
	heldBack := []string{"Pod a-0-1 held back"}
	steps := []struct {
		name     string
		at       time.Duration
		p        *plan
		want     []string
		wantWait time.Duration
	}{{
		name: "the first raises are named, the rest counted; a held-back raise has a count of its own",
		p:    &plan{memoryRaised: raised(0, 7), memoryHeldBack: heldBack},
		want: append(append(prefixed("Normal MemoryRaised: ", raisedMessages(raised(0, 5))),
			"Normal MemoryRaised: 2 more pods got their memory raised after OOM kills; `kubectl ibj indexes a -o wide` shows each index's memory"),
			"Warning MemoryRaiseHeldBack: Pod a-0-1 held back"),
	}, {
		name:     "within the interval: held",
		at:       time.Second,
		p:        &plan{memoryRaised: raised(7, 8)},
		wantWait: time.Minute - time.Second,
	}, {
		name: "the interval over",
		at:   time.Minute,
		p:    &plan{},
		want: []string{"Normal MemoryRaised: 1 more pod got its memory raised after OOM kills; `kubectl ibj indexes a -o wide` shows each index's memory"},
	}}
	for _, step := range steps {
		evs, wait := e.pacedEvents("job", "a", step.p, 0, testNow.Add(step.at))
		if got := rendered(evs); !slices.Equal(got, step.want) {
			t.Errorf("%s: events\n%s\nwant\n%s", step.name, strings.Join(got, "\n"), strings.Join(step.want, "\n"))
		}
		if wait != step.wantWait {
			t.Errorf("%s: come back in %v, want %v", step.name, wait, step.wantWait)
		}
	}
}

func prefixed(prefix string, ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = prefix + s
	}
	return out
}

// A sync that held an event back comes back for it: apply requeues it for
// when the pace lets the event go.
func TestApplyComesBackForAHeldEvent(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Obj()
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
	recorder := events.NewFakeRecorder(20)
	clk := clocktesting.NewFakeClock(testNow)
	r := NewReconciler(api, recorder, clk, jobpod.DefaultBackoff)
	ctx := context.Background()
	if _, err := r.apply(ctx, job, plan{status: job.Status, indexFailures: failures(0, namedIndexFailures+1)}); err != nil {
		t.Fatal(err)
	}
	if got := len(recorder.Events); got != namedIndexFailures+1 {
		t.Fatalf("first sync: %d events, want %d", got, namedIndexFailures+1)
	}
	clk.Step(time.Second)
	if err := api.Get(ctx, client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	res, err := r.apply(ctx, job, plan{status: job.Status, indexFailures: failures(6, 7)})
	if err != nil {
		t.Fatal(err)
	}
	if len(recorder.Events) != namedIndexFailures+1 {
		t.Errorf("the second sync, within the interval, emitted %d more events", len(recorder.Events)-namedIndexFailures-1)
	}
	if want := moreFailuresInterval - time.Second; res.RequeueAfter != want {
		t.Errorf("RequeueAfter = %v, want %v, when the held count may go", res.RequeueAfter, want)
	}
}
