package podcache

import (
	"bytes"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// client-go reads a watch event in protobuf in three copies: the frame, the
// WatchEvent's object (copied out of the frame), and the content of the
// object's runtime.Unknown envelope (copied out of the object), and only
// then decodes the pod from the last. For the pod informer, which reads
// every event of every pod, those copies are about a fifth of all the
// operator allocates. wireSerializer reads a pod's event in place: the
// event's object is a slice of the frame, and the pod is decoded straight
// from the envelope's content within it. Everything else (a list, a Status,
// an error event, JSON) is decoded by wireCodecs as before.

// wireSerializer is wireCodecs without conversion, whose protobuf decoders
// read a Pod's watch event and its envelope in place. It is the pod
// informer's serializer.
var wireSerializer runtime.NegotiatedSerializer = newWireNegotiator(wireCodecs.WithoutConversion())

// wireNegotiator replaces the protobuf serializers of the negotiator it
// wraps.
type wireNegotiator struct {
	runtime.NegotiatedSerializer
	infos []runtime.SerializerInfo
}

func newWireNegotiator(ns runtime.NegotiatedSerializer) wireNegotiator {
	infos := append([]runtime.SerializerInfo(nil), ns.SupportedMediaTypes()...)
	for i, info := range infos {
		if info.MediaType != runtime.ContentTypeProtobuf {
			continue
		}
		infos[i].Serializer = podEnvelopeSerializer{info.Serializer}
		if info.StreamSerializer != nil {
			stream := *info.StreamSerializer
			stream.Serializer = watchEventSerializer{stream.Serializer}
			infos[i].StreamSerializer = &stream
		}
	}
	return wireNegotiator{NegotiatedSerializer: ns, infos: infos}
}

// SupportedMediaTypes is asked on every request: it returns the same slice.
func (n wireNegotiator) SupportedMediaTypes() []runtime.SerializerInfo { return n.infos }

// protobufPrefix starts every protobuf-encoded object the API server sends
// outside a watch stream's frames.
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

var podGVK = corev1.SchemeGroupVersion.WithKind("Pod")

// podEnvelopeSerializer decodes a core/v1 Pod's envelope in place into a
// wirePod, and hands anything else to the serializer it wraps.
type podEnvelopeSerializer struct{ runtime.Serializer }

// Decode decodes data into a new wirePod, or into into when it is one.
func (s podEnvelopeSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	raw, ok := podInEnvelope(data)
	pod, isPod := into.(*wirePod)
	if !ok || (into != nil && (!isPod || pod == nil)) {
		return s.Serializer.Decode(data, defaults, into)
	}
	if pod == nil {
		pod = &wirePod{}
	}
	gvk := podGVK
	if err := pod.Unmarshal(raw); err != nil {
		return nil, &gvk, err
	}
	pod.GetObjectKind().SetGroupVersionKind(gvk)
	return pod, &gvk, nil
}

// podInEnvelope returns the content of data's runtime.Unknown envelope if
// data is a protobuf-encoded core/v1 Pod. Anything it cannot read as one,
// malformed input included, it leaves to the wrapped serializer, which
// reports it as it always has.
func podInEnvelope(data []byte) ([]byte, bool) {
	if !bytes.HasPrefix(data, protobufPrefix) {
		return nil, false
	}
	var apiVersion, kind, raw []byte
	var hasRaw bool
	err := forEachField(data[len(protobufPrefix):], func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1: // typeMeta
			return forEachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ == protowire.BytesType && num == 1 {
					apiVersion = v
				} else if typ == protowire.BytesType && num == 2 {
					kind = v
				}
				return nil
			})
		case 2: // raw
			raw, hasRaw = v, true
		}
		return nil
	})
	if err != nil || !hasRaw || string(apiVersion) != "v1" || string(kind) != "Pod" {
		return nil, false
	}
	return raw, true
}

var watchEventGVK = corev1.SchemeGroupVersion.WithKind("WatchEvent")

// watchEventSerializer decodes a watch stream's frame into a
// metav1.WatchEvent whose object is a slice of the frame, not a copy: it is
// valid only until the stream reads its next frame, which is how client-go's
// watch decoder uses it (it decodes the object before it reads on). Every
// other decode goes to the serializer it wraps.
type watchEventSerializer struct{ runtime.Serializer }

// Decode decodes data into into when it is a *metav1.WatchEvent.
func (s watchEventSerializer) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	ev, ok := into.(*metav1.WatchEvent)
	if !ok || ev == nil {
		return s.Serializer.Decode(data, defaults, into)
	}
	var typ string
	var object []byte
	var hasObject bool
	err := forEachField(data, func(num protowire.Number, wt protowire.Type, v []byte, _ uint64) error {
		if wt != protowire.BytesType {
			return nil
		}
		switch num {
		case 1: // type
			typ = watchEventType(v)
		case 2: // object, a runtime.RawExtension
			return forEachField(v, func(num protowire.Number, wt protowire.Type, v []byte, _ uint64) error {
				if wt == protowire.BytesType && num == 1 {
					object, hasObject = v, true
				}
				return nil
			})
		}
		return nil
	})
	if err != nil || !hasObject {
		return s.Serializer.Decode(data, defaults, into)
	}
	*ev = metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: object}}
	gvk := watchEventGVK
	return ev, &gvk, nil
}

// watchEventType is the event type named by b, without allocating for the
// types the API server sends.
func watchEventType(b []byte) string {
	switch string(b) {
	case string(watch.Added):
		return string(watch.Added)
	case string(watch.Modified):
		return string(watch.Modified)
	case string(watch.Deleted):
		return string(watch.Deleted)
	case string(watch.Bookmark):
		return string(watch.Bookmark)
	case string(watch.Error):
		return string(watch.Error)
	}
	return string(b)
}
