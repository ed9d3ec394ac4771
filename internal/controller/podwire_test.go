package controller

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// wirePodCases are pods in every state a sync tells apart, with what an API
// server adds (managed fields, defaulted spec fields, a generation).
func wirePodCases() map[string]*corev1.Pod {
	job := harness.MakeIndexedBatchJob("train", "ns").BackoffLimitPerIndex(2).InitContainer("setup").Obj()
	job.UID = "job-uid"
	cases := map[string]*corev1.Pod{
		"pending":          makePod(job, 0).api(),
		"ready":            makePod(job, 1).ready().api(),
		"succeeded":        makePod(job, 2).succeededAt(testNow).api(),
		"failed, retried":  makePodFor(job, podToCreate{index: 3, attempt: 2, failures: 1, ignored: 1}).failedAt(testNow, 42).condition(corev1.DisruptionTarget, corev1.ConditionTrue).api(),
		"init failed":      makePod(job, 4).initFailedAt(testNow, "setup", 3).api(),
		"deleted":          makePod(job, 5).running().deletedAt(testNow).api(),
		"discarded, freed": makePod(job, 6).failedAt(testNow, 1).discarded().withoutFinalizer().api(),
		"bad index":        makePod(job, 7).label(ibjv1.CompletionIndexLabel, "x").api(),
		"no status":        makePod(job, 8).failedWithoutStatus().api(),
	}
	foreign := makePod(job, 9).api()
	foreign.OwnerReferences = nil
	cases["no owner"] = foreign
	for _, pod := range cases {
		pod.ResourceVersion = "1234"
		pod.Generation = 3
		pod.GenerateName = "train-"
		pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:status":{}}`), Subresource: "status"}}
		pod.Spec.NodeName = "node-1"
		pod.Spec.TerminationGracePeriodSeconds = ptr.To[int64](30)
	}
	cases["deleted"].DeletionGracePeriodSeconds = ptr.To[int64](30)
	return cases
}

var cachedPodCmp = cmp.AllowUnexported(cachedPod{})

// What the pod informer caches of a pod read as a wirePod is what it
// caches of the whole pod; the spec and the managed fields are not read.
func TestWirePodIsCachedAsThePod(t *testing.T) {
	for name, pod := range wirePodCases() {
		t.Run(name, func(t *testing.T) {
			data, err := pod.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			var wp wirePod
			if err := wp.Unmarshal(data); err != nil {
				t.Fatalf("Unmarshal: %v", err)
			}
			if diff := cmp.Diff(newCachedPod(pod), newCachedPod(&wp.Pod), cachedPodCmp); diff != "" {
				t.Errorf("cached pod (-whole pod +wirePod):\n%s", diff)
			}
			if wp.ManagedFields != nil || wp.Generation != 0 || wp.GenerateName != "" || len(wp.Spec.Containers) != 0 || wp.Spec.NodeName != "" {
				t.Errorf("wirePod decoded what no sync reads: managedFields %v, generation %d, generateName %q, spec %+v",
					wp.ManagedFields, wp.Generation, wp.GenerateName, wp.Spec)
			}
			if diff := cmp.Diff(pod.Status, wp.Status); diff != "" {
				t.Errorf("status (-pod +wirePod):\n%s", diff)
			}
		})
	}
}

// A PodList and a watch event's Pod, as the API server encodes them in
// protobuf (magic prefix, runtime.Unknown envelope), decode through
// wireCodecs into wirePods, as the pod informer's list and watch read them.
func TestWireCodecsDecodeTheServersPods(t *testing.T) {
	cases := wirePodCases()
	list := &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "99", Continue: "next"}}
	for _, name := range []string{"pending", "failed, retried", "deleted"} {
		list.Items = append(list.Items, *cases[name])
	}
	encoder := protobufCodec(t, clientgoscheme.Codecs)
	var buf bytes.Buffer
	if err := encoder.Encode(list, &buf); err != nil {
		t.Fatal(err)
	}
	decoder := protobufCodec(t, wireCodecs.WithoutConversion())
	obj, _, err := decoder.Decode(buf.Bytes(), nil, nil)
	if err != nil {
		t.Fatalf("decoding the list: %v", err)
	}
	got, ok := obj.(*wirePodList)
	if !ok {
		t.Fatalf("decoded a %T, want a *wirePodList", obj)
	}
	if got.ResourceVersion != "99" || got.Continue != "next" || len(got.Items) != len(list.Items) {
		t.Fatalf("list metadata %+v with %d items, want resourceVersion 99, continue next, %d items", got.ListMeta, len(got.Items), len(list.Items))
	}
	for i := range list.Items {
		if diff := cmp.Diff(newCachedPod(&list.Items[i]), newCachedPod(&got.Items[i].Pod), cachedPodCmp); diff != "" {
			t.Errorf("item %d (-pod +decoded):\n%s", i, diff)
		}
	}
	if c, ok := got.DeepCopyObject().(*wirePodList); !ok || !cmp.Equal(c, got) {
		t.Errorf("DeepCopyObject of the list = %T, not an equal *wirePodList", c)
	}

	buf.Reset()
	if err := encoder.Encode(cases["ready"], &buf); err != nil {
		t.Fatal(err)
	}
	obj, _, err = decoder.Decode(buf.Bytes(), nil, nil)
	if err != nil {
		t.Fatalf("decoding the pod: %v", err)
	}
	pod, ok := obj.(*wirePod)
	if !ok {
		t.Fatalf("decoded a %T, want a *wirePod", obj)
	}
	if diff := cmp.Diff(newCachedPod(cases["ready"]), newCachedPod(&pod.Pod), cachedPodCmp); diff != "" {
		t.Errorf("pod (-pod +decoded):\n%s", diff)
	}
	if out, err := compactPod(pod); err != nil || !cmp.Equal(out, newCachedPod(cases["ready"]), cachedPodCmp) {
		t.Errorf("compactPod(wirePod) = %v, %v; want the pod's cachedPod", out, err)
	}
}

// protobufCodec is the codec factory's protobuf serializer for core/v1.
func protobufCodec(t testing.TB, codecs runtime.NegotiatedSerializer) runtime.Codec {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	return runtime.NewCodec(codecs.EncoderForVersion(info.Serializer, corev1.SchemeGroupVersion), codecs.DecoderToVersion(info.Serializer, corev1.SchemeGroupVersion))
}

// For any pod, encoded as the API server encodes it (the generated
// Marshal), wirePod reads it and the pod is cached the same: the decoder
// skips fields, never misreads one. The pods are whatever the generated
// decoder makes of the fuzzer's bytes; on those raw bytes, wirePod must
// return, with or without an error, and never panic.
func FuzzWirePod(f *testing.F) {
	for _, pod := range wirePodCases() {
		data, err := pod.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var raw wirePod
		_ = raw.Unmarshal(data)
		var whole corev1.Pod
		if err := whole.Unmarshal(data); err != nil {
			return
		}
		encoded, err := whole.Marshal()
		if err != nil {
			t.Fatalf("Marshal of a decoded pod: %v", err)
		}
		var wp wirePod
		if err := wp.Unmarshal(encoded); err != nil {
			t.Fatalf("wirePod fails on an encoded pod: %v", err)
		}
		if diff := cmp.Diff(newCachedPod(&whole), newCachedPod(&wp.Pod), cachedPodCmp); diff != "" {
			t.Fatalf("cached pod (-whole pod +wirePod):\n%s", diff)
		}
	})
}
