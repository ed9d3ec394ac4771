package podcache

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// failingPods counts, by job (namespace/job-name), the cached pods that
// failed or are terminating and still carry the tracking finalizer:
// failures that no sync has counted yet (a terminating pod is one under
// podReplacementPolicy TerminatingOrFailed, and soon one under Failed),
// and when the cache saw the latest of them. A job has an entry only while
// its count is above zero.
type failingPods struct {
	mu    sync.Mutex
	byJob map[string]*failures
	// now is the clock (time.Now unless a test sets it).
	now func() time.Time
}

type failures struct {
	count int
	// seen is when the cache saw the latest failure.
	seen time.Time
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
		f.byJob = map[string]*failures{}
	}
	if was {
		k := jobKey(old)
		if e := f.byJob[k]; e == nil || e.count <= 1 {
			delete(f.byJob, k)
		} else {
			e.count--
		}
	}
	if is {
		k := jobKey(pod)
		e := f.byJob[k]
		if e == nil {
			e = &failures{}
			f.byJob[k] = e
		}
		e.count++
		if f.now == nil {
			e.seen = time.Now()
		} else {
			e.seen = f.now()
		}
	}
}

// seen is when the cache saw the latest failure of the job that no sync
// has counted yet; zero without one.
func (f *failingPods) seen(namespace, job string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.byJob[namespace+"/"+job]; e != nil {
		return e.seen
	}
	return time.Time{}
}

// has reports whether the pod's job has a failure no sync counted yet.
func (f *failingPods) has(pod *jobpod.Pod) bool {
	if pod.JobName == "" {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byJob[jobKey(pod)] != nil
}

func (f *failingPods) len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.byJob)
}
