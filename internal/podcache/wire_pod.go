package podcache

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
)

// The pod informer decodes every watch event of every pod of every job:
// three or more per pod. A Pod decoded in full is mostly what no sync reads:
// the spec (containers, volumes, tolerations, ...) and the managed fields,
// which grow with each writer. wirePod reads a Pod's protobuf encoding
// without them, so that the informer neither spends CPU decoding them nor
// allocates what the transform would drop at once. newCachedPod then reads
// the result as it reads any Pod: what it reads of the metadata and the
// status is decoded as the generated code decodes it
// (TestWirePodIsCachedAsThePod, FuzzWirePod).

// wirePod is a Pod decoded from protobuf without its spec (but its
// nodeName) and without the
// metadata fields newCachedPod does not read (generateName, selfLink,
// generation, managedFields). It is registered as core/v1 Pod only in
// wireCodecs, for the pod informer; from JSON (a server that would not
// answer in protobuf) it decodes as a whole Pod.
type wirePod struct {
	corev1.Pod `json:",inline"`
}

// Reset is called by the protobuf serializer before Unmarshal.
func (p *wirePod) Reset() { *p = wirePod{} }

// Unmarshal reads the Pod's metadata and status from its protobuf encoding
// and skips everything else.
func (p *wirePod) Unmarshal(b []byte) error {
	p.Pod = corev1.Pod{}
	return forEachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return unmarshalMeta(v, &p.ObjectMeta)
		case num == 2 && typ == protowire.BytesType:
			return unmarshalNodeName(v, &p.Spec)
		case num == 3 && typ == protowire.BytesType:
			return p.Status.Unmarshal(v)
		}
		return nil
	})
}

// unmarshalNodeName reads the one field of a PodSpec a sync reads, its
// nodeName (field 10), and skips the rest.
func unmarshalNodeName(b []byte, spec *corev1.PodSpec) error {
	return forEachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num == 10 && typ == protowire.BytesType {
			spec.NodeName = string(v)
		}
		return nil
	})
}

// DeepCopyObject copies the Pod (as a wirePod, so the copy is one of the
// scheme's types too).
func (p *wirePod) DeepCopyObject() runtime.Object {
	return &wirePod{Pod: *p.DeepCopy()}
}

// wirePodList is a PodList whose items are wirePods.
type wirePodList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []wirePod `json:"items"`
}

// Reset is called by the protobuf serializer before Unmarshal.
func (l *wirePodList) Reset() { *l = wirePodList{} }

// Unmarshal reads the list's metadata and its items.
func (l *wirePodList) Unmarshal(b []byte) error {
	l.ListMeta, l.Items = metav1.ListMeta{}, nil
	return forEachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			return l.ListMeta.Unmarshal(v)
		case num == 2 && typ == protowire.BytesType:
			l.Items = append(l.Items, wirePod{})
			return l.Items[len(l.Items)-1].Unmarshal(v)
		}
		return nil
	})
}

// DeepCopyObject copies the list.
func (l *wirePodList) DeepCopyObject() runtime.Object {
	out := &wirePodList{TypeMeta: l.TypeMeta}
	l.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]wirePod, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i].Pod)
		}
	}
	return out
}

// wireCodecs decode core/v1 Pods and PodLists as wirePods, and the meta
// types a list or a watch carries (watch events, Status) as usual.
var wireCodecs = func() serializer.CodecFactory {
	s := runtime.NewScheme()
	s.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("Pod"), &wirePod{})
	s.AddKnownTypeWithName(corev1.SchemeGroupVersion.WithKind("PodList"), &wirePodList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return serializer.NewCodecFactory(s)
}()

// errWire reports protobuf input the decoder cannot read.
var errWire = errors.New("malformed protobuf")

// forEachField calls f with each field of a protobuf message, in order:
// with a length-delimited field's content as v, with a varint field's
// value as x, and with neither for the other wire types.
func forEachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: %v", errWire, protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %v", errWire, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// unmarshalMeta reads the ObjectMeta fields newCachedPod reads (name,
// namespace, uid, resourceVersion, creation and deletion timestamps, the
// deletion grace period, labels, annotations, owner references and
// finalizers), each as the generated ObjectMeta.Unmarshal reads it from
// what the API server sends (FuzzWirePod), and skips the others.
func unmarshalMeta(b []byte, m *metav1.ObjectMeta) error {
	return forEachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if typ == protowire.VarintType && num == 10 {
			grace := int64(x)
			m.DeletionGracePeriodSeconds = &grace
		}
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case 1:
			m.Name = string(v)
		case 3:
			m.Namespace = string(v)
		case 5:
			m.UID = types.UID(v)
		case 6:
			m.ResourceVersion = string(v)
		case 8:
			return m.CreationTimestamp.Unmarshal(v)
		case 9:
			if m.DeletionTimestamp == nil {
				m.DeletionTimestamp = &metav1.Time{}
			}
			return m.DeletionTimestamp.Unmarshal(v)
		case 11:
			return unmarshalMapEntry(v, &m.Labels)
		case 12:
			return unmarshalMapEntry(v, &m.Annotations)
		case 13:
			m.OwnerReferences = append(m.OwnerReferences, metav1.OwnerReference{})
			return m.OwnerReferences[len(m.OwnerReferences)-1].Unmarshal(v)
		case 14:
			m.Finalizers = append(m.Finalizers, string(v))
		}
		return nil
	})
}

// unmarshalMapEntry adds one map<string, string> entry (key 1, value 2) to
// *m, making the map if it is nil.
func unmarshalMapEntry(b []byte, m *map[string]string) error {
	var key, value string
	err := forEachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ == protowire.BytesType && num == 1 {
			key = string(v)
		} else if typ == protowire.BytesType && num == 2 {
			value = string(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = map[string]string{}
	}
	(*m)[key] = value
	return nil
}
