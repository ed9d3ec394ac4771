package podcache

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// serverWatchStream encodes events as the API server sends a watch in
// protobuf: length-prefixed frames, each a WatchEvent whose object is the
// object in its envelope.
func serverWatchStream(t testing.TB, events []watch.Event) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(clientgoscheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok || info.StreamSerializer == nil {
		t.Fatal("no protobuf stream serializer")
	}
	var buf bytes.Buffer
	enc := restclientwatch.NewEncoder(
		streaming.NewEncoder(info.StreamSerializer.NewFrameWriter(&buf), info.StreamSerializer.Serializer),
		clientgoscheme.Codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion))
	for i := range events {
		if err := enc.Encode(&events[i]); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// clientWatchDecoder reads stream as client-go's REST client reads a watch
// response in protobuf with the negotiated serializer ns.
func clientWatchDecoder(t testing.TB, ns runtime.NegotiatedSerializer, stream []byte) *restclientwatch.Decoder {
	t.Helper()
	objects, events, framer, err := runtime.NewClientNegotiator(ns, corev1.SchemeGroupVersion).
		StreamDecoder(runtime.ContentTypeProtobuf, nil)
	if err != nil {
		t.Fatal(err)
	}
	frames := framer.NewFrameReader(io.NopCloser(bytes.NewReader(stream)))
	return restclientwatch.NewDecoder(streaming.NewDecoder(frames, events), objects)
}

// decodeAll reads every event of the stream, all before any is looked at,
// so that an object still pointing into a reused frame would show.
func decodeAll(t *testing.T, ns runtime.NegotiatedSerializer, stream []byte) []watch.Event {
	t.Helper()
	dec := clientWatchDecoder(t, ns, stream)
	var out []watch.Event
	for {
		typ, obj, err := dec.Decode()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("event %d: %v", len(out), err)
		}
		out = append(out, watch.Event{Type: typ, Object: obj})
	}
}

// watchEvents is a watch of pods in every state, with a bookmark and an
// error event.
func watchEvents() []watch.Event {
	cases := wirePodCases()
	names := make([]string, 0, len(cases))
	for name := range cases {
		names = append(names, name)
	}
	slices.Sort(names)
	var events []watch.Event
	for i, name := range names {
		typ := []watch.EventType{watch.Added, watch.Modified, watch.Deleted}[i%3]
		events = append(events, watch.Event{Type: typ, Object: cases[name]})
	}
	bookmark := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "4321",
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	gone := apierrors.NewResourceExpired("too old resource version: 1 (4321)").ErrStatus
	return append(events,
		watch.Event{Type: watch.Bookmark, Object: bookmark},
		watch.Event{Type: watch.Error, Object: &gone})
}

// The pod informer's serializer reads the API server's watch stream to the
// same events, pod for pod, as wireCodecs read it with client-go's decoders,
// and no decoded pod keeps a slice of a frame that the next one reuses.
func TestWireSerializerReadsTheServersWatchStream(t *testing.T) {
	stream := serverWatchStream(t, watchEvents())
	want := decodeAll(t, wireCodecs.WithoutConversion(), stream)
	got := decodeAll(t, wireSerializer, stream)
	if len(got) != len(want) || len(want) != len(watchEvents()) {
		t.Fatalf("decoded %d events, wireCodecs %d, sent %d", len(got), len(want), len(watchEvents()))
	}
	for i := range want {
		if got[i].Type != want[i].Type {
			t.Errorf("event %d: type %s, want %s", i, got[i].Type, want[i].Type)
		}
		if diff := cmp.Diff(want[i].Object, got[i].Object); diff != "" {
			t.Errorf("event %d (%s): object (-wireCodecs +wireSerializer):\n%s", i, want[i].Type, diff)
		}
	}
	for i, ev := range got[:len(got)-2] {
		if _, ok := ev.Object.(*wirePod); !ok {
			t.Errorf("event %d decoded a %T, want a *wirePod", i, ev.Object)
		}
	}
	if _, ok := got[len(got)-1].Object.(*metav1.Status); !ok {
		t.Errorf("the error event decoded a %T, want a *metav1.Status", got[len(got)-1].Object)
	}
}

// Read in place, a pod's event costs fewer allocations than with
// client-go's decoders: neither the event's object nor the envelope's
// content is copied.
func TestWireSerializerDoesNotCopyAPodsEvent(t *testing.T) {
	pod := wirePodCases()["failed, retried"]
	frame := serverWatchStream(t, []watch.Event{{Type: watch.Modified, Object: pod}})
	allocs := func(ns runtime.NegotiatedSerializer) float64 {
		return testing.AllocsPerRun(50, func() {
			if _, _, err := clientWatchDecoder(t, ns, frame).Decode(); err != nil {
				t.Fatal(err)
			}
		})
	}
	copying, inPlace := allocs(wireCodecs.WithoutConversion()), allocs(wireSerializer)
	// Fewer by the event's object, the envelope's content and its type's
	// two strings; either decoder left to client-go saves at most three.
	if inPlace > copying-4 {
		t.Errorf("decoding a pod's event: %.0f allocations in place, %.0f with client-go's decoders; want at least 4 fewer", inPlace, copying)
	}
}

// Outside a watch, the pod informer's list and anything else the REST
// client reads decode as wireCodecs decode them.
func TestWireSerializerDecodesListsAndStatusesAsBefore(t *testing.T) {
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "7"}, Items: []corev1.Pod{*wirePodCases()["pending"]}}
	status := apierrors.NewNotFound(schema.GroupResource{Resource: "pods"}, "gone").ErrStatus
	encoder := protobufCodec(t, clientgoscheme.Codecs)
	for _, obj := range []runtime.Object{list, &status, wirePodCases()["ready"]} {
		var buf bytes.Buffer
		if err := encoder.Encode(obj, &buf); err != nil {
			t.Fatal(err)
		}
		want, _, werr := protobufCodec(t, wireCodecs.WithoutConversion()).Decode(buf.Bytes(), nil, nil)
		got, _, gerr := protobufCodec(t, wireSerializer).Decode(buf.Bytes(), nil, nil)
		if werr != nil || gerr != nil {
			t.Fatalf("decoding a %T: %v, before %v", obj, gerr, werr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%T (-wireCodecs +wireSerializer):\n%s", obj, diff)
		}
	}
}

// For any bytes, the in-place decode of an object never panics, and
// whatever wireCodecs decode to a pod it decodes to the same pod.
func FuzzWireEnvelope(f *testing.F) {
	encoder := protobufCodec(f, clientgoscheme.Codecs)
	for _, pod := range wirePodCases() {
		var buf bytes.Buffer
		if err := encoder.Encode(pod, &buf); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add(protobufPrefix)
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _, gerr := protobufCodec(t, wireSerializer).Decode(data, nil, nil)
		want, _, werr := protobufCodec(t, wireCodecs.WithoutConversion()).Decode(data, nil, nil)
		if werr != nil {
			return
		}
		if _, ok := want.(*wirePod); !ok {
			return
		}
		if gerr != nil {
			t.Fatalf("wireCodecs decode a pod that the in-place decode fails on: %v", gerr)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Fatalf("pod (-wireCodecs +in place):\n%s", diff)
		}
	})
}
