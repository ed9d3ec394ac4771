package controller

import (
	"context"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/indexed-batch-job/indexed-batch-job/internal/throttle"
)

// The event sink's bounds. While fewer than eventsUrgent writes are
// pending, each goes as a background request (throttle.Background): it
// takes only the client budget that pod creates, status writes and
// finalizer removals that count leave over. A fleet of jobs created
// together reports its events once its pods are made, not in between.
// Past eventsUrgent pending, they go as any request does, so a
// budget used whole for long does not starve the events; past
// eventsQueued, a new event is dropped (logged), as client-go's
// broadcaster drops an event once 1,000 wait for its sink.
const (
	eventsUrgent = 4096
	eventsQueued = 8192
	// eventWriteTries is how many times a write that failed for a reason
	// that may pass (not a refusal of the event itself) is sent.
	eventWriteTries = 5
	// eventRetryDelay is the first wait before a failed write is sent
	// again; it doubles with each try.
	eventRetryDelay = 500 * time.Millisecond
	// eventDrainTimeout bounds how long stopping the sink keeps sending
	// the events still queued, well within a pod's default grace period
	// of 30 s.
	eventDrainTimeout = 5 * time.Second
)

// eventWrite is one write the recorder asked of the sink: a create, or a
// patch of an event it aggregates (its count and last timestamp).
type eventWrite struct {
	event *corev1.Event
	patch []byte
}

// eventLanes is how many workers send the events, each the events of the
// objects whose UID hashes to its lane, in the order they came: a patch
// follows its create, and a job's events keep their order.
const eventLanes = 4

// eventSink is the record.EventSink the recorder writes through. It takes
// each write into its object's lane and answers at once with the event as
// it was given (the recorder keeps its name and count to patch it later).
type eventSink struct {
	events typedcorev1.EventsGetter
	lanes  [eventLanes]eventLane
	// queued counts the writes waiting in every lane, dropped the writes
	// refused for want of room.
	queued, dropped atomic.Int64
	stop            context.CancelFunc
	done            sync.WaitGroup
	// sleep waits between tries; tests replace it.
	sleep func(ctx context.Context, d time.Duration)
}

// eventLane is one worker's queue.
type eventLane struct {
	mu    sync.Mutex
	queue []eventWrite
	// wake has a value while the queue may hold writes the worker has not
	// seen.
	wake chan struct{}
}

var _ record.EventSink = (*eventSink)(nil)

func newEventSink(events typedcorev1.EventsGetter) *eventSink {
	s := &eventSink{events: events, sleep: sleepCtx}
	for i := range s.lanes {
		s.lanes[i].wake = make(chan struct{}, 1)
	}
	return s
}

// Create queues the event's create.
func (s *eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	s.push(eventWrite{event: e})
	return e, nil
}

// Update queues the event's create: the core/v1 recorder updates no event
// (it patches), and a create of the whole event stands for it.
func (s *eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	s.push(eventWrite{event: e})
	return e, nil
}

// Patch queues the patch of an event the recorder aggregates; e is the
// event as patched.
func (s *eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	s.push(eventWrite{event: e, patch: data})
	return e, nil
}

func (s *eventSink) push(w eventWrite) {
	if s.queued.Add(1) > eventsQueued {
		s.queued.Add(-1)
		n := s.dropped.Add(1)
		klog.V(1).InfoS("Dropped an event: too many are waiting to be written", "object", klog.KRef(w.event.InvolvedObject.Namespace, w.event.InvolvedObject.Name),
			"reason", w.event.Reason, "waiting", eventsQueued, "droppedSoFar", n)
		return
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(w.event.InvolvedObject.UID))
	s.lanes[h.Sum32()%eventLanes].add(w)
}

func (l *eventLane) add(w eventWrite) {
	l.mu.Lock()
	l.queue = append(l.queue, w)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// start runs the workers until shutdown.
func (s *eventSink) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	for i := range s.lanes {
		s.done.Go(func() { s.run(ctx, &s.lanes[i]) })
	}
}

// shutdown stops the workers once their queues are sent, or after
// eventDrainTimeout with what is left unsent.
func (s *eventSink) shutdown() {
	if s.stop == nil {
		return
	}
	timer := time.AfterFunc(eventDrainTimeout, s.stop)
	defer timer.Stop()
	for i := range s.lanes {
		s.lanes[i].add(eventWrite{}) // the end: sent after the rest
	}
	s.done.Wait()
	s.stop()
}

// run sends the lane's queue in order until ctx ends or it reaches the end
// that shutdown queued.
func (s *eventSink) run(ctx context.Context, l *eventLane) {
	for {
		l.mu.Lock()
		var w eventWrite
		ok := len(l.queue) > 0
		if ok {
			w = l.queue[0]
		}
		l.mu.Unlock()
		if !ok {
			select {
			case <-l.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if w.event == nil {
			return
		}
		s.send(ctx, w)
		l.mu.Lock()
		l.queue[0] = eventWrite{}
		l.queue = l.queue[1:]
		if len(l.queue) == 0 {
			l.queue = nil // let the array go
		}
		l.mu.Unlock()
		s.queued.Add(-1)
		if ctx.Err() != nil {
			return
		}
	}
}

// send writes w, trying again a few times when the failure may pass. A
// patch of an event that is gone (expired, deleted) creates it.
func (s *eventSink) send(ctx context.Context, w eventWrite) {
	delay := eventRetryDelay
	for try := 1; ; try++ {
		rctx := ctx
		if s.queued.Load() < eventsUrgent {
			rctx = throttle.Background(ctx)
		}
		err := s.write(rctx, w)
		if err == nil || ctx.Err() != nil {
			return
		}
		if w.patch != nil && apierrors.IsNotFound(err) {
			w.patch = nil
			continue
		}
		if try >= eventWriteTries || apierrors.IsAlreadyExists(err) || apierrors.IsInvalid(err) || apierrors.IsForbidden(err) ||
			apierrors.IsBadRequest(err) || apierrors.IsNotFound(err) {
			// A namespace being deleted refuses its events (Forbidden,
			// NotFound): as client-go's recorder, give the event up.
			klog.V(1).InfoS("Could not write an event", "object", klog.KRef(w.event.InvolvedObject.Namespace, w.event.InvolvedObject.Name),
				"reason", w.event.Reason, "tries", try, "err", err)
			return
		}
		s.sleep(ctx, delay)
		delay *= 2
	}
}

func (s *eventSink) write(ctx context.Context, w eventWrite) error {
	events := s.events.Events(w.event.Namespace)
	if w.patch != nil {
		_, err := events.Patch(ctx, w.event.Name, types.StrategicMergePatchType, w.patch, metav1.PatchOptions{})
		return err
	}
	e := w.event.DeepCopy()
	e.ResourceVersion = ""
	_, err := events.Create(ctx, e, metav1.CreateOptions{})
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
