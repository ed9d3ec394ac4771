package podcache

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// wirePodCases are pods in every state a sync tells apart, with what an API
// server adds (managed fields, defaulted spec fields, a generation).
func wirePodCases() map[string]*corev1.Pod {
	job := harness.MakeIndexedBatchJob("train", "ns").BackoffLimitPerIndex(2).InitContainer("setup").Obj()
	job.UID = "job-uid"
	cases := map[string]*corev1.Pod{
		"pending":          harness.MakePod(job, 0, 0, created).Obj(),
		"ready":            harness.MakePod(job, 1, 0, created).Ready().Obj(),
		"succeeded":        harness.MakePod(job, 2, 0, created).SucceededAt(testNow).Obj(),
		"failed, retried":  harness.MakePod(job, 3, 2, created).Annotation(ibjv1.IndexFailureCountAnnotation, "1").Annotation(ibjv1.IndexIgnoredFailureCountAnnotation, "1").FailedAt(testNow, 42).Condition(corev1.DisruptionTarget, corev1.ConditionTrue).Obj(),
		"init failed":      harness.MakePod(job, 4, 0, created).InitFailedAt(testNow, "setup", 3).Obj(),
		"deleted":          harness.MakePod(job, 5, 0, created).Running().DeletedAt(testNow).Obj(),
		"discarded, freed": harness.MakePod(job, 6, 0, created).FailedAt(testNow, 1).Discarded().WithoutFinalizer().Obj(),
		"bad index":        harness.MakePod(job, 7, 0, created).Label(ibjv1.CompletionIndexLabel, "x").Obj(),
		"no status":        harness.MakePod(job, 8, 0, created).FailedWithoutStatus().Obj(),
	}
	inPlace := harness.MakePod(job, 10, 0, created).Running().Obj()
	inPlace.Status.ContainerStatuses[0].RestartCount = 2
	inPlace.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "setup", RestartCount: 1}}
	cases["restarted in place"] = inPlace
	unschedulable := harness.MakePod(job, 11, 0, created).Obj()
	unschedulable.Status.Conditions = append(unschedulable.Status.Conditions, corev1.PodCondition{Type: corev1.PodScheduled,
		Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"})
	cases["unschedulable"] = unschedulable
	evicted := harness.MakePod(job, 12, 0, created).FailedAt(testNow, 137).Obj()
	evicted.Status.Reason = "Evicted"
	cases["evicted"] = evicted
	foreign := harness.MakePod(job, 9, 0, created).Obj()
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

var cachedPodCmp = cmp.AllowUnexported(jobpod.Pod{})

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
			if diff := cmp.Diff(jobpod.Read(pod), jobpod.Read(&wp.Pod), cachedPodCmp); diff != "" {
				t.Errorf("cached pod (-whole pod +wirePod):\n%s", diff)
			}
			if got := jobpod.Read(&wp.Pod); got.NodeName != "node-1" {
				t.Errorf("decoded node name %q, want node-1", got.NodeName)
			}
			if name == "unschedulable" && jobpod.Read(&wp.Pod).Unschedulable != "0/3 nodes are available" {
				t.Errorf("decoded Unschedulable %q, want the scheduler's message", jobpod.Read(&wp.Pod).Unschedulable)
			}
			if name == "evicted" && jobpod.Read(&wp.Pod).Reason != "Evicted" {
				t.Errorf("decoded Reason %q, want Evicted", jobpod.Read(&wp.Pod).Reason)
			}
			if name == "restarted in place" {
				if got := jobpod.Read(&wp.Pod); got.InPlace != 2 || got.Restarts != 3 {
					t.Errorf("decoded restarts: in place %d, all %d; want 2 (the containers'), 3 (init containers' too)", got.InPlace, got.Restarts)
				}
			}
			if wp.ManagedFields != nil || wp.Generation != 0 || wp.GenerateName != "" || len(wp.Spec.Containers) != 0 || wp.Spec.NodeName != pod.Spec.NodeName {
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
		if diff := cmp.Diff(jobpod.Read(&list.Items[i]), jobpod.Read(&got.Items[i].Pod), cachedPodCmp); diff != "" {
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
	if diff := cmp.Diff(jobpod.Read(cases["ready"]), jobpod.Read(&pod.Pod), cachedPodCmp); diff != "" {
		t.Errorf("pod (-pod +decoded):\n%s", diff)
	}
	if out, err := compactPod(pod); err != nil || !cmp.Equal(out, jobpod.Read(cases["ready"]), cachedPodCmp) {
		t.Errorf("compactPod(wirePod) = %v, %v; want the pod's jobpod.Pod", out, err)
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
		if diff := cmp.Diff(jobpod.Read(&whole), jobpod.Read(&wp.Pod), cachedPodCmp); diff != "" {
			t.Fatalf("cached pod (-whole pod +wirePod):\n%s", diff)
		}
	})
}

// testNow is the fixed "now" of the tests; created is when their pods were
// created, an hour before.
var (
	testNow = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)
	created = testNow.Add(-time.Hour)
)
