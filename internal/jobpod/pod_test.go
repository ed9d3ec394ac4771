package jobpod

import (
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// The struct is a fraction of a decoded Pod's: this is what keeps a job of
// 100,000 pods in a few hundred MB. The bound is about a third (35%) of the
// Pod struct, whose own size moves a little with the k8s.io/api version;
// a decoded Pod's heap, which the cache no longer holds, is far larger.
func TestPodIsSmall(t *testing.T) {
	if got, pod := unsafe.Sizeof(Pod{}), unsafe.Sizeof(corev1.Pod{}); got*100 > pod*35 {
		t.Errorf("Pod is %d bytes, want at most 35%% of a Pod's %d", got, pod)
	}
}

// A pod is stray when it holds a finalizer of the operator but its labels
// or its controller reference no longer tie it to one job; what Read takes
// for the owner is an IndexedBatchJob's controller reference only.
func TestStrayed(t *testing.T) {
	const uid = "job-uid"
	mk := func(edit func(*corev1.Pod)) *corev1.Pod {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
			Name: "a-0-0", Namespace: "ns",
			Labels:     map[string]string{ibjv1.JobNameLabel: "a", ibjv1.ControllerUIDLabel: uid, ibjv1.CompletionIndexLabel: "0"},
			Finalizers: []string{ibjv1.TrackingFinalizer},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob", Name: "a", UID: uid, Controller: ptr.To(true),
			}},
		}}
		edit(pod)
		return pod
	}
	for _, tc := range []struct {
		name string
		edit func(*corev1.Pod)
		want bool
	}{
		{"as made", func(*corev1.Pod) {}, false},
		{"job-name label removed", func(p *corev1.Pod) { delete(p.Labels, ibjv1.JobNameLabel) }, true},
		{"controller-uid label removed", func(p *corev1.Pod) { delete(p.Labels, ibjv1.ControllerUIDLabel) }, true},
		{"controller-uid label names another job", func(p *corev1.Pod) { p.Labels[ibjv1.ControllerUIDLabel] = "other" }, true},
		{"controller reference removed", func(p *corev1.Pod) { p.OwnerReferences = nil }, true},
		{"controlled by a ReplicaSet", func(p *corev1.Pod) {
			p.OwnerReferences[0].APIVersion, p.OwnerReferences[0].Kind = "apps/v1", "ReplicaSet"
		}, true},
		{"an IndexedBatchJob of another version", func(p *corev1.Pod) { p.OwnerReferences[0].APIVersion = ibjv1.GroupVersion.Group + "/v1" }, false},
		{"only the index-retry finalizer", func(p *corev1.Pod) {
			p.Finalizers = []string{ibjv1.IndexRetryFinalizer}
			delete(p.Labels, ibjv1.JobNameLabel)
		}, true},
		{"no finalizer of ours: nothing to let go", func(p *corev1.Pod) {
			p.Finalizers = []string{"example.com/other"}
			delete(p.Labels, ibjv1.JobNameLabel)
		}, false},
	} {
		if got := Read(mk(tc.edit)).Strayed(); got != tc.want {
			t.Errorf("%s: Strayed() = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// The cap of a namespace is the smallest Container maximum memory among its
// LimitRanges; a Pod or PersistentVolumeClaim limit, or a Container
// maximum of another resource, sets none.
func TestMemoryCapOf(t *testing.T) {
	lr := func(name string, items ...corev1.LimitRangeItem) corev1.LimitRange {
		return corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.LimitRangeSpec{Limits: items}}
	}
	item := func(typ corev1.LimitType, res corev1.ResourceName, q string) corev1.LimitRangeItem {
		return corev1.LimitRangeItem{Type: typ, Max: corev1.ResourceList{res: resource.MustParse(q)}}
	}
	if got := MemoryCapOf(nil); got != nil {
		t.Errorf("no LimitRange: %+v, want nil", got)
	}
	none := []corev1.LimitRange{lr("pod", item(corev1.LimitTypePod, corev1.ResourceMemory, "1Gi")), lr("cpu", item(corev1.LimitTypeContainer, corev1.ResourceCPU, "2"))}
	if got := MemoryCapOf(none); got != nil {
		t.Errorf("no Container memory maximum: %+v, want nil", got)
	}
	got := MemoryCapOf(append(none, lr("wide", item(corev1.LimitTypeContainer, corev1.ResourceMemory, "4Gi")),
		lr("narrow", item(corev1.LimitTypeContainer, corev1.ResourceCPU, "1"), item(corev1.LimitTypeContainer, corev1.ResourceMemory, "1536Mi"))))
	if got == nil || got.LimitRange != "narrow" || got.Max.String() != "1536Mi" {
		t.Errorf("MemoryCapOf = %+v, want 1536Mi from narrow", got)
	}
}

// A container the kubelet could not find once it ended the pod (an
// eviction) is written terminated as ContainerStatusUnknown with its
// restart count raised by one, though it never ran again: that is no
// failure in place, while a restart before it is.
func TestStatusUnknownIsNoRestartInPlace(t *testing.T) {
	unknown := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "ContainerStatusUnknown", ExitCode: 137}}
	for _, tc := range []struct {
		name          string
		restarts      int32
		state         corev1.ContainerState
		wantInPlace   int32
		wantRestarted int32
	}{
		{"evicted, never restarted", 1, unknown, 0, 1},
		{"restarted in place once, then evicted", 2, unknown, 1, 2},
		{"restarted in place once, then failed", 1, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}, 1, 1},
		// The kubelet's first write of the lost container: waiting, its
		// last termination ContainerStatusUnknown, the restart counted.
		{"evicted, the kubelet's first write", 1, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}, 0, 1},
		{"restarted in place once, waiting to run again", 1, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}, 1, 1},
	} {
		var last corev1.ContainerState
		if tc.state.Waiting != nil && tc.state.Waiting.Reason == "" {
			last = unknown
		} else if tc.state.Waiting != nil {
			last = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1}}
		}
		pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "main", RestartCount: tc.restarts, State: tc.state, LastTerminationState: last},
		}}}
		if got := Read(pod); got.InPlace != tc.wantInPlace || got.Restarts != tc.wantRestarted {
			t.Errorf("%s: InPlace %d, Restarts %d; want %d and %d", tc.name, got.InPlace, got.Restarts, tc.wantInPlace, tc.wantRestarted)
		}
	}
}
