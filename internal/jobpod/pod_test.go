package jobpod

import (
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
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
