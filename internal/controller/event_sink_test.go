package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

// eventCall is one request the sink sent.
type eventCall struct {
	Verb, Name string
	Background bool
}

// recordedEvents is an events API that records what it is sent and
// answers with the errors queued for it (nil once they run out). Its
// gate, when set, holds every request until closed.
type recordedEvents struct {
	mu      sync.Mutex
	calls   []eventCall
	stored  map[string]bool
	errs    []error
	gate    chan struct{}
	started chan struct{}
}

func newRecordedEvents() *recordedEvents {
	return &recordedEvents{stored: map[string]bool{}, started: make(chan struct{}, 100)}
}

func (r *recordedEvents) Events(string) typedcorev1.EventInterface {
	return recordedEventsNS{recordedEvents: r}
}

func (r *recordedEvents) answer(ctx context.Context, verb, name string) error {
	select {
	case r.started <- struct{}{}:
	default:
	}
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, eventCall{verb, name, throttle.IsBackground(ctx)})
	if len(r.errs) > 0 {
		err := r.errs[0]
		r.errs = r.errs[1:]
		if err != nil {
			return err
		}
	}
	switch {
	case verb == "create" && r.stored[name]:
		return apierrors.NewAlreadyExists(schema.GroupResource{Resource: "events"}, name)
	case verb == "patch" && !r.stored[name]:
		return apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, name)
	}
	r.stored[name] = true
	return nil
}

func (r *recordedEvents) sent() []eventCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]eventCall(nil), r.calls...)
}

// recordedEventsNS embeds the interface for the methods the sink never
// calls: one would panic on the nil.
type recordedEventsNS struct {
	*recordedEvents
	typedcorev1.EventInterface
}

func (r recordedEventsNS) Create(ctx context.Context, e *corev1.Event, _ metav1.CreateOptions) (*corev1.Event, error) {
	return e, r.answer(ctx, "create", e.Name)
}

func (r recordedEventsNS) Patch(ctx context.Context, name string, _ types.PatchType, _ []byte, _ metav1.PatchOptions, _ ...string) (*corev1.Event, error) {
	return nil, r.answer(ctx, "patch", name)
}

func sinkEvent(name string, uid types.UID) *corev1.Event {
	return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "7"},
		InvolvedObject: corev1.ObjectReference{Name: "job", Namespace: "ns", UID: uid}, Reason: "SuccessfulCreate"}
}

// startedSink is a sink on api, started (after setup, if any) and shut down
// when the test ends.
func startedSink(t *testing.T, api *recordedEvents, setup ...func(*eventSink)) *eventSink {
	s := newEventSink(api)
	for _, f := range setup {
		f(s)
	}
	s.start()
	t.Cleanup(s.shutdown)
	return s
}

// settle waits until the sink has no write left.
func settle(t *testing.T, s *eventSink) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for s.queued.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d writes still queued", s.queued.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

func TestEventSinkAnswersAtOnceAndSendsEachObjectsEventsInOrderInTheBackground(t *testing.T) {
	api := newRecordedEvents()
	api.gate = make(chan struct{})
	s := startedSink(t, api)

	// The recorder is answered at once, while nothing is sent yet, with
	// the event it gave (it keeps the name and count to patch it).
	first := sinkEvent("job.1", "a")
	got, err := s.Create(first)
	if err != nil || got != first {
		t.Fatalf("Create answered %v, %v; want the event given and no error", got, err)
	}
	if got, err := s.Patch(first, []byte(`{"count":2}`)); err != nil || got != first {
		t.Fatalf("Patch answered %v, %v; want the event given and no error", got, err)
	}
	_, _ = s.Create(sinkEvent("job.2", "a"))
	_, _ = s.Patch(sinkEvent("job.2", "a"), []byte(`{"count":2}`))
	close(api.gate)
	settle(t, s)

	want := []eventCall{{"create", "job.1", true}, {"patch", "job.1", true}, {"create", "job.2", true}, {"patch", "job.2", true}}
	if diff := cmp.Diff(want, api.sent()); diff != "" {
		t.Errorf("requests sent (-want +got):\n%s", diff)
	}
}

func TestEventSinkCreatesAnEventItsPatchDoesNotFind(t *testing.T) {
	api := newRecordedEvents()
	s := startedSink(t, api)

	_, _ = s.Patch(sinkEvent("job.gone", "a"), []byte(`{"count":3}`))
	settle(t, s)
	want := []eventCall{{"patch", "job.gone", true}, {"create", "job.gone", true}}
	if diff := cmp.Diff(want, api.sent()); diff != "" {
		t.Errorf("requests sent (-want +got):\n%s", diff)
	}
}

func TestEventSinkRetriesAFailureThatMayPassAndGivesUpARefusal(t *testing.T) {
	for _, tc := range []struct {
		name  string
		errs  []error
		tries int
	}{
		{"a timeout is tried again", []error{apierrors.NewServerTimeout(schema.GroupResource{Resource: "events"}, "create", 1)}, 2},
		{"a server down every time is tried eventWriteTries times", []error{
			fmt.Errorf("connection refused"), fmt.Errorf("connection refused"), fmt.Errorf("connection refused"),
			fmt.Errorf("connection refused"), fmt.Errorf("connection refused"), fmt.Errorf("connection refused"),
		}, eventWriteTries},
		{"an invalid event is given up", []error{apierrors.NewInvalid(schema.GroupKind{Kind: "Event"}, "job.1", nil)}, 1},
		{"a namespace being deleted is given up", []error{apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "job.1", fmt.Errorf("namespace ns is being terminated"))}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := newRecordedEvents()
			api.errs = tc.errs
			var waits []time.Duration
			s := startedSink(t, api, func(s *eventSink) {
				s.sleep = func(_ context.Context, d time.Duration) { waits = append(waits, d) }
			})

			_, _ = s.Create(sinkEvent("job.1", "a"))
			settle(t, s)
			if got := len(api.sent()); got != tc.tries {
				t.Errorf("sent %d times, want %d", got, tc.tries)
			}
			for i, d := range waits {
				if want := eventRetryDelay << i; d != want {
					t.Errorf("wait %d was %v, want %v", i, d, want)
				}
			}
		})
	}
}

func TestEventSinkSendsAsAnyRequestPastUrgentAndDropsPastItsBound(t *testing.T) {
	api := newRecordedEvents()
	api.gate = make(chan struct{})
	s := startedSink(t, api)

	// One object's events, all in one lane: the first is held in flight
	// by the gate (it is sent, and decides how, before the rest are
	// queued: a worker slow to start would otherwise find the queue full
	// already), the rest wait behind it.
	_, _ = s.Create(sinkEvent("job.0", "a"))
	<-api.started
	for i := 1; i < eventsQueued+10; i++ {
		_, _ = s.Create(sinkEvent(fmt.Sprintf("job.%d", i), "a"))
	}
	if got := s.dropped.Load(); got != 10 {
		t.Errorf("dropped %d events past the bound, want 10", got)
	}
	close(api.gate)
	settle(t, s)

	calls := api.sent()
	if len(calls) != eventsQueued {
		t.Fatalf("sent %d events, want %d", len(calls), eventsQueued)
	}
	for i, c := range calls {
		if want := fmt.Sprintf("job.%d", i); c.Name != want {
			t.Fatalf("request %d was for %s, want %s: the lane keeps the order", i, c.Name, want)
		}
		// The write in flight asked when the queue was not yet full; the
		// later ones go as any request until fewer than eventsUrgent wait.
		left := eventsQueued - i
		if wantBackground := i == 0 || left < eventsUrgent; c.Background != wantBackground {
			t.Fatalf("request %d (%d queued) went in the background: %v, want %v", i, left, c.Background, wantBackground)
		}
	}
}

func TestEventSinkShutdownSendsWhatIsQueued(t *testing.T) {
	api := newRecordedEvents()
	s := newEventSink(api)
	api.gate = make(chan struct{})
	s.start()
	for i := range 20 {
		_, _ = s.Create(sinkEvent(fmt.Sprintf("job.%d", i), types.UID(fmt.Sprint(i))))
	}
	close(api.gate)
	s.shutdown()
	if got := len(api.sent()); got != 20 {
		t.Errorf("sent %d of the 20 queued events before stopping", got)
	}
}
