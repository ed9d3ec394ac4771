package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
)

// eventCacheSize bounds the keys the recorder keeps to aggregate repeated
// events and filter spam (client-go's default is 4096): a job emits two
// or three, so these cover the jobs of the last few minutes on a busy
// cluster, which is where repeats come from.
const eventCacheSize = 1024

// NewEventRecorder returns the recorder the operator reports its events
// with, and a func that stops it: client-go's core/v1 recorder, as the
// built-in Job controller uses, whose aggregation and spam filter keep
// their keys in LRU caches of a fixed size (eventCacheSize). The events.k8s.io
// recorder (controller-runtime's default) keeps every event it sent in a
// map for 6 to 12 minutes, so its memory grows with the jobs that came and
// went in that time: a thousand bytes and more per finished job, which the
// soak test shows. The API server serves the events in both APIs.
//
// The recorder writes through an eventSink: the events wait for the client
// budget the pods and the statuses leave over. The returned func stops the
// recorder and sends what is still queued (for at most eventDrainTimeout).
func NewEventRecorder(clientset kubernetes.Interface, scheme *runtime.Scheme, component string) (events.EventRecorder, func()) {
	broadcaster := record.NewBroadcaster(record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: eventCacheSize}))
	sink := newEventSink(clientset.CoreV1())
	sink.start()
	broadcaster.StartRecordingToSink(sink)
	recorder := broadcaster.NewRecorder(scheme, corev1.EventSource{Component: component})
	return coreRecorder{recorder}, func() {
		broadcaster.Shutdown()
		sink.shutdown()
	}
}

// coreRecorder is a core/v1 recorder behind the events.k8s.io recorder
// interface the reconciler uses. The core API has no related object and
// no action, so both are dropped.
type coreRecorder struct {
	record.EventRecorder
}

// Eventf implements events.EventRecorder.
func (c coreRecorder) Eventf(regarding, _ runtime.Object, eventtype, reason, _, note string, args ...any) {
	c.EventRecorder.Eventf(regarding, eventtype, reason, note, args...)
}
