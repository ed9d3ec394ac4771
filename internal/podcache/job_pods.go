package podcache

import (
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// jobPods are the cached pods of each job (namespace/job-name), kept by the
// event handler from the events it gets: a sync lists its job's pods as a
// copy of one slice, rather than each pod looked up by its key, and finds a
// pod of its job by name. What a sync reads is what the handler has seen,
// which is what queued the sync: a pod event reaches the lists before the
// sync it asks for.
//
// A sync may settle pods (settle): pods whose end is recorded and that no
// later sync needs to see, so that the next syncs list only the rest
// (listUnsettled) and cost what can still change, not the job's size. A
// settled pod comes back into the list with its next change, and all of
// them do when a sync asks (unsettle) or a job of another UID lists them.
type jobPods struct {
	mu    sync.RWMutex
	byJob map[string]*podList
}

// podList is one job's pods, and where each is in the slice, by pod name
// (unique in the job's namespace); the settled pods are in settled instead.
type podList struct {
	pods []*jobpod.Pod
	at   map[string]int
	// settled are the settled pods by name, for the job of UID settledFor;
	// settledIndexes holds their indexes (and those of settled pods since
	// deleted), lastSuccess the latest end among them.
	settled        map[string]*jobpod.Pod
	settledFor     types.UID
	settledIndexes indexset.Set
	lastSuccess    time.Time
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
		if was, ok := l.settled[pod.Name]; ok {
			if was.ResourceVersion == pod.ResourceVersion {
				// The same object again (a relist): it stays settled.
				l.settled[pod.Name] = pod
				return
			}
			delete(l.settled, pod.Name)
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
	if _, ok := l.settled[pod.Name]; ok {
		delete(l.settled, pod.Name)
	} else if i, ok := l.at[pod.Name]; ok {
		l.take(i)
	}
	if len(l.pods) == 0 && len(l.settled) == 0 {
		delete(j.byJob, k)
	}
}

// take drops the pod at position i from the list's slice.
func (l *podList) take(i int) {
	name := l.pods[i].Name
	last := len(l.pods) - 1
	l.pods[i] = l.pods[last]
	l.at[l.pods[i].Name] = i
	l.pods[last] = nil
	l.pods = l.pods[:last]
	delete(l.at, name)
}

// unsettle puts every settled pod back into the list.
func (l *podList) unsettle() {
	for name, pod := range l.settled {
		l.at[name] = len(l.pods)
		l.pods = append(l.pods, pod)
	}
	l.settled, l.settledFor, l.settledIndexes, l.lastSuccess = nil, "", indexset.Set{}, time.Time{}
}

// list is a copy of the job's pods, in no order, the settled ones included.
func (j *jobPods) list(namespace, job string) []*jobpod.Pod {
	j.mu.RLock()
	defer j.mu.RUnlock()
	l := j.byJob[namespace+"/"+job]
	if l == nil {
		return nil
	}
	pods := slices.Grow(slices.Clone(l.pods), len(l.settled))
	for _, pod := range l.settled {
		pods = append(pods, pod)
	}
	return pods
}

// listUnsettled is a copy of the job's pods but those settled for the job
// of UID owner, in no order, with the indexes of the settled pods (a
// superset: it keeps those of pods deleted since) and the latest end among
// them. Pods settled for another UID (an earlier job of the name) are
// unsettled first, and listed.
func (j *jobPods) listUnsettled(namespace, job string, owner types.UID) ([]*jobpod.Pod, indexset.Set, time.Time) {
	k := namespace + "/" + job
	j.mu.RLock()
	l := j.byJob[k]
	if l == nil || l.settledFor == "" || l.settledFor == owner {
		defer j.mu.RUnlock()
		if l == nil {
			return nil, indexset.Set{}, time.Time{}
		}
		return slices.Clone(l.pods), l.settledIndexes, l.lastSuccess
	}
	j.mu.RUnlock()
	j.unsettle(namespace, job)
	return j.list(namespace, job), indexset.Set{}, time.Time{}
}

// settle keeps the given pods of the job out of listUnsettled for the job
// of UID owner: each only if the cache holds that very object still (a pod
// changed since the sync that chose it stays listed).
func (j *jobPods) settle(namespace, job string, owner types.UID, pods []*jobpod.Pod) {
	if len(pods) == 0 {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	l := j.byJob[namespace+"/"+job]
	if l == nil {
		return
	}
	if l.settledFor != owner && len(l.settled) > 0 {
		l.unsettle()
	}
	var indexes []int32
	for _, pod := range pods {
		i, ok := l.at[pod.Name]
		if !ok || l.pods[i] != pod {
			continue
		}
		l.take(i)
		if l.settled == nil {
			l.settled = map[string]*jobpod.Pod{}
		}
		l.settled[pod.Name] = pod
		indexes = append(indexes, pod.Index)
		if pod.FinishedAt.After(l.lastSuccess) {
			l.lastSuccess = pod.FinishedAt
		}
	}
	if len(indexes) > 0 {
		l.settledFor = owner
		l.settledIndexes = l.settledIndexes.Union(indexset.Of(indexes...))
	}
}

// unsettle puts the job's settled pods back into its list.
func (j *jobPods) unsettle(namespace, job string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if l := j.byJob[namespace+"/"+job]; l != nil {
		l.unsettle()
	}
}

// get is the job's pod of that name, nil if it has none; a settled pod
// too.
func (j *jobPods) get(namespace, job, name string) *jobpod.Pod {
	j.mu.RLock()
	defer j.mu.RUnlock()
	if l := j.byJob[namespace+"/"+job]; l != nil {
		if i, ok := l.at[name]; ok {
			return l.pods[i]
		}
		return l.settled[name]
	}
	return nil
}
