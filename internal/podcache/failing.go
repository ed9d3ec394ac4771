package podcache

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// failingPods counts, by job (namespace/job-name), the cached pods that
// failed or are terminating and still carry the tracking finalizer:
// failures that no sync has counted yet (a terminating pod is one under
// podReplacementPolicy TerminatingOrFailed, and soon one under Failed). A
// job has an entry only while its count is above zero.
type failingPods struct {
	mu    sync.Mutex
	byJob map[string]int
}

// uncountedFailure: the pod failed, or is terminating, and its end is not
// counted yet.
func uncountedFailure(pod *jobpod.Pod) bool {
	return pod != nil && pod.JobName != "" && pod.Tracked && (pod.Phase == corev1.PodFailed || pod.Terminating())
}

func jobKey(pod *jobpod.Pod) string { return pod.Namespace + "/" + pod.JobName }

// update takes a pod's change from old to pod (nil for an add or a delete).
func (f *failingPods) update(old, pod *jobpod.Pod) {
	was, is := uncountedFailure(old), uncountedFailure(pod)
	if was == is && (!was || jobKey(old) == jobKey(pod)) {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.byJob == nil {
		f.byJob = map[string]int{}
	}
	if was {
		if k := jobKey(old); f.byJob[k] <= 1 {
			delete(f.byJob, k)
		} else {
			f.byJob[k]--
		}
	}
	if is {
		f.byJob[jobKey(pod)]++
	}
}

// has reports whether the pod's job has a failure no sync counted yet.
func (f *failingPods) has(pod *jobpod.Pod) bool {
	if pod.JobName == "" {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byJob[jobKey(pod)] > 0
}

func (f *failingPods) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byJob)
}
