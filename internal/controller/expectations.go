package controller

import (
	"strconv"
	"time"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"k8s.io/apimachinery/pkg/types"
)

// expectationTimeout bounds how long a create that the cache never shows
// blocks further creates for its job, as upstream's ExpectationsTimeout.
const expectationTimeout = 5 * time.Minute

// finalizerExpectationTimeout bounds how long a finalizer removal the cache
// does not show yet keeps the pod from being patched again; past it the
// pod is patched again, which is harmless.
const finalizerExpectationTimeout = time.Minute

// jobExpectations are the part of a job's state (job_state.go) that says
// what this process wrote and its cache has not shown yet: the pods it
// created, the pods whose tracking finalizer it removed, and the
// resourceVersion of its last status write; and when the API server last
// refused one of its pod creates. A sync acts on a cache that is current
// with its own writes, or not at all; this is what keeps one pod per index
// when the cache lags. After a restart they are empty, and rightly so: the
// new cache was listed after every write of the old process.
type jobExpectations struct {
	creates map[string]time.Time
	// finalizers are pods whose finalizer removal succeeded but whose
	// update the cache has not shown: a sync in between would patch them
	// again (upstream's finalizerExpectations).
	finalizers    map[types.UID]finalizerRemoval
	statusVersion string
	// statusWritten is when the status was last written.
	statusWritten time.Time
	// heldStart is the startTime of the job's first status, held back
	// and not written yet (holdCounters); zero if none.
	heldStart time.Time
	// createRefused is when the API server last refused one of the job's
	// pod creates, for spec.retryBackoff.createRefusedDelaySeconds; zero
	// once a create went through.
	createRefused time.Time
}

// finalizerRemoval is a finalizer removal the cache may not show yet: when
// it was made, and the pod's name, by which observeFinalizers looks the pod
// up.
type finalizerRemoval struct {
	at   time.Time
	name string
}

// expectCreate is called before creating a pod.
func (e *jobStates) expectCreate(uid types.UID, name string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state(uid).creates[name] = now
}

// createFailed forgets a create the API server refused.
func (e *jobStates) createFailed(uid types.UID, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.state(uid).creates, name)
}

// createLeft forgets the expected create of a pod the cache saw leave the
// job (edited out of it, strays.go) before a sync could see it as the
// job's: that create will never be observed, and waiting for it would hold
// the job's pods until the expectation timed out. A job without
// expectations gets no entry.
func (e *jobStates) createLeft(uid types.UID, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[uid]; j != nil {
		delete(j.creates, name)
	}
}

// wroteStatus remembers the resourceVersion the status write returned, and
// when it was written.
func (e *jobStates) wroteStatus(uid types.UID, resourceVersion string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.state(uid)
	j.statusVersion, j.statusWritten, j.heldStart = resourceVersion, now, time.Time{}
}

// holdStart remembers the startTime of the job's first status, held back
// (holdCounters) until its next write; zero forgets it.
func (e *jobStates) holdStart(uid types.UID, start time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.state(uid).heldStart = start
}

// statusWrites is when the job's status was last written, zero if this
// process has not written it, and the startTime of its first status held
// back (holdStart), zero if none.
func (e *jobStates) statusWrites(uid types.UID) (last, heldStart time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[uid]; j != nil {
		return j.statusWritten, j.heldStart
	}
	return time.Time{}, time.Time{}
}

// createsRefused remembers whether the API server refused one of the job's
// pod creates at now (refused), or took them all (it then forgets the
// last refusal).
func (e *jobStates) createsRefused(uid types.UID, refused bool, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.state(uid)
	if refused {
		j.createRefused = now
	} else {
		j.createRefused = time.Time{}
	}
}

// lastCreateRefused is when the API server last refused one of the job's
// pod creates, zero if it has not since the last create it took (or this
// process has not tried).
func (e *jobStates) lastCreateRefused(uid types.UID) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[uid]; j != nil {
		return j.createRefused
	}
	return time.Time{}
}

// podsSeen reports whether the cache shows every pod this process created
// for the job (or the wait timed out); seen creates are forgotten. cached
// says whether the cache shows the job's pod of a name: the creates waited
// for are a sync's few, the job's pods maybe thousands, so each create is
// looked up in the cache.
func (e *jobStates) podsSeen(uid types.UID, cached func(name string) bool, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[uid]
	if j == nil || len(j.creates) == 0 {
		return true
	}
	for name, at := range j.creates {
		if cached(name) || now.Sub(at) > expectationTimeout {
			delete(j.creates, name)
		}
	}
	return len(j.creates) == 0
}

// removedFinalizers remembers pods of the job whose finalizer is gone.
func (e *jobStates) removedFinalizers(job types.UID, pods []*jobpod.Pod, now time.Time) {
	if len(pods) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.state(job)
	for _, pod := range pods {
		j.finalizers[pod.UID] = finalizerRemoval{at: now, name: pod.Name}
	}
}

// releasedInBackground remembers a pod whose finalizer the background queue
// removed, if the job still has expectations: the queue outlives the syncs
// of its jobs, and an entry made for a job already forgotten (gone, or
// deleted and its expectations dropped) would stay for good. Without the
// entry, at worst a sync patches the pod once more, which is harmless.
func (e *jobStates) releasedInBackground(job types.UID, pod *jobpod.Pod, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[job]; j != nil {
		j.finalizers[pod.UID] = finalizerRemoval{at: now, name: pod.Name}
	}
}

// unpatched returns the pods whose finalizer this process has not removed
// already, in their order.
func (e *jobStates) unpatched(job types.UID, pods []*jobpod.Pod) []*jobpod.Pod {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[job]
	if j == nil || len(j.finalizers) == 0 {
		return pods
	}
	out := make([]*jobpod.Pod, 0, len(pods))
	for _, pod := range pods {
		if _, done := j.finalizers[pod.UID]; !done {
			out = append(out, pod)
		}
	}
	return out
}

// observeFinalizers forgets the removals the cache now shows (the pod is
// gone, or has no tracking finalizer) and those older than
// finalizerExpectationTimeout. It looks up the job's pods by name (cached),
// one per removal remembered: a job of 100,000 pods whose finalizers go
// in the background has a few hundred at most, and its sync walks none of
// its pods for this. The sync calls it before it lists the pods: a removal
// the cache shows now, the list shows too.
func (e *jobStates) observeFinalizers(job types.UID, cached func(name string) *jobpod.Pod, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[job]
	if j == nil {
		return
	}
	for uid, removal := range j.finalizers {
		pod := cached(removal.name)
		if pod == nil || pod.UID != uid || !pod.Tracked || now.Sub(removal.at) > finalizerExpectationTimeout {
			delete(j.finalizers, uid)
		}
	}
}

// jobStale reports whether the cached job is older than this process's last
// status write. resourceVersions are etcd revisions, compared as numbers;
// one that is not a number is taken as current.
func (e *jobStates) jobStale(uid types.UID, cachedVersion string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[uid]
	if j == nil || j.statusVersion == "" {
		return false
	}
	written, err1 := parseVersion(j.statusVersion)
	cached, err2 := parseVersion(cachedVersion)
	if err1 != nil || err2 != nil || cached >= written {
		j.statusVersion = ""
		return false
	}
	return true
}

// parseVersion reads a resourceVersion as the number etcd makes it.
func parseVersion(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) }
