package podcache

import (
	"slices"
	"sync"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// jobPods are the cached pods of each job (namespace/job-name), kept by the
// event handler from the events it gets: a sync lists its job's pods as a
// copy of one slice, rather than each pod looked up by its key, and finds a
// pod of its job by name. What a sync reads is what the handler has seen,
// which is what queued the sync: a pod event reaches the lists before the
// sync it asks for.
type jobPods struct {
	mu    sync.RWMutex
	byJob map[string]*podList
}

// podList is one job's pods, and where each is in the slice, by pod name
// (unique in the job's namespace).
type podList struct {
	pods []*jobpod.Pod
	at   map[string]int
}

// update takes a pod's change from old to pod (nil for an add or a
// delete). A pod without a job-name label is in no list.
func (j *jobPods) update(old, pod *jobpod.Pod) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.byJob == nil {
		j.byJob = map[string]*podList{}
	}
	if old != nil && (pod == nil || old.Namespace != pod.Namespace || old.JobName != pod.JobName || old.Name != pod.Name) {
		j.remove(old)
	}
	if pod != nil && pod.JobName != "" {
		k := jobKey(pod)
		l := j.byJob[k]
		if l == nil {
			l = &podList{at: map[string]int{}}
			j.byJob[k] = l
		}
		if i, ok := l.at[pod.Name]; ok {
			l.pods[i] = pod
		} else {
			l.at[pod.Name] = len(l.pods)
			l.pods = append(l.pods, pod)
		}
	}
}

// remove drops the pod from its job's list, the list once empty; j.mu is
// held.
func (j *jobPods) remove(pod *jobpod.Pod) {
	if pod.JobName == "" {
		return
	}
	k := jobKey(pod)
	l := j.byJob[k]
	if l == nil {
		return
	}
	i, ok := l.at[pod.Name]
	if !ok {
		return
	}
	last := len(l.pods) - 1
	l.pods[i] = l.pods[last]
	l.at[l.pods[i].Name] = i
	l.pods[last] = nil
	l.pods = l.pods[:last]
	delete(l.at, pod.Name)
	if len(l.pods) == 0 {
		delete(j.byJob, k)
	}
}

// list is a copy of the job's pods, in no order.
func (j *jobPods) list(namespace, job string) []*jobpod.Pod {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if l := j.byJob[namespace+"/"+job]; l != nil {
		return slices.Clone(l.pods)
	}
	return nil
}

// get is the job's pod of that name, nil if it has none.
func (j *jobPods) get(namespace, job, name string) *jobpod.Pod {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if l := j.byJob[namespace+"/"+job]; l != nil {
		if i, ok := l.at[name]; ok {
			return l.pods[i]
		}
	}
	return nil
}
