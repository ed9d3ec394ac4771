package controller

import (
	"strconv"
	"sync"
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

// expectations remembers, per job, what this process wrote and its cache
// has not shown yet: the pods it created, the pods whose tracking finalizer
// it removed, and the resourceVersion of its last status write; and when
// the API server last refused one of its pod creates. A sync acts
// on a cache that is current with its own writes, or not at all; this is
// what keeps one pod per index when the cache lags. After a restart the
// store is empty, and rightly so: the new cache was listed after every write
// of the old process.
type expectations struct {
	mu   sync.Mutex
	jobs map[types.UID]*jobExpectations
}

type jobExpectations struct {
	creates map[string]time.Time
	// finalizers are pods whose finalizer removal succeeded but whose
	// update the cache has not shown: a sync in between would patch them
	// again (upstream's finalizerExpectations).
	finalizers    map[types.UID]time.Time
	statusVersion string
	// statusWritten is when the status was last written.
	statusWritten time.Time
	// createRefused is when the API server last refused one of the job's
	// pod creates, for spec.retryBackoff.createRefusedDelaySeconds; zero
	// once a create went through.
	createRefused time.Time
}

func newExpectations() *expectations {
	return &expectations{jobs: map[types.UID]*jobExpectations{}}
}

func (e *expectations) get(uid types.UID) *jobExpectations {
	j := e.jobs[uid]
	if j == nil {
		j = &jobExpectations{creates: map[string]time.Time{}, finalizers: map[types.UID]time.Time{}}
		e.jobs[uid] = j
	}
	return j
}

// expectCreate is called before creating a pod.
func (e *expectations) expectCreate(uid types.UID, name string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(uid).creates[name] = now
}

// createFailed forgets a create the API server refused.
func (e *expectations) createFailed(uid types.UID, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.get(uid).creates, name)
}

// createLeft forgets the expected create of a pod the cache saw leave the
// job (edited out of it, strays.go) before a sync could see it as the
// job's: that create will never be observed, and waiting for it would hold
// the job's pods until the expectation timed out. A job without
// expectations gets no entry.
func (e *expectations) createLeft(uid types.UID, name string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[uid]; j != nil {
		delete(j.creates, name)
	}
}

// wroteStatus remembers the resourceVersion the status write returned, and
// when it was written.
func (e *expectations) wroteStatus(uid types.UID, resourceVersion string, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.get(uid)
	j.statusVersion, j.statusWritten = resourceVersion, now
}

// lastStatusWrite is when the job's status was last written, zero if this
// process has not written it.
func (e *expectations) lastStatusWrite(uid types.UID) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[uid]; j != nil {
		return j.statusWritten
	}
	return time.Time{}
}

// createsRefused remembers whether the API server refused one of the job's
// pod creates at now (refused), or took them all (it then forgets the
// last refusal).
func (e *expectations) createsRefused(uid types.UID, refused bool, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.get(uid)
	if refused {
		j.createRefused = now
	} else {
		j.createRefused = time.Time{}
	}
}

// lastCreateRefused is when the API server last refused one of the job's
// pod creates, zero if it has not since the last create it took (or this
// process has not tried).
func (e *expectations) lastCreateRefused(uid types.UID) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[uid]; j != nil {
		return j.createRefused
	}
	return time.Time{}
}

// sizes reports how many jobs have expectations and how many creates and
// finalizer removals they wait to see, for trackedEntries.
func (e *expectations) sizes() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{"expectations": len(e.jobs), "expected_creates": 0, "expected_finalizers": 0}
	for _, j := range e.jobs {
		out["expected_creates"] += len(j.creates)
		out["expected_finalizers"] += len(j.finalizers)
	}
	return out
}

// forget drops everything about a job that is gone.
func (e *expectations) forget(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.jobs, uid)
}

// podsSeen reports whether the cache shows every pod this process created
// for the job (or the wait timed out); seen creates are forgotten.
func (e *expectations) podsSeen(uid types.UID, pods []*jobpod.Pod, now time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[uid]
	if j == nil || len(j.creates) == 0 {
		return true
	}
	names := make(map[string]bool, len(pods))
	for _, p := range pods {
		names[p.Name] = true
	}
	for name, at := range j.creates {
		if names[name] || now.Sub(at) > expectationTimeout {
			delete(j.creates, name)
		}
	}
	return len(j.creates) == 0
}

// removedFinalizers remembers pods of the job whose finalizer is gone.
func (e *expectations) removedFinalizers(job types.UID, pods []*jobpod.Pod, now time.Time) {
	if len(pods) == 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.get(job)
	for _, pod := range pods {
		j.finalizers[pod.UID] = now
	}
}

// track gives a job that is being synced an entry, if it has none, so
// that releasedInBackground can record against it until forget.
func (e *expectations) track(uid types.UID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.get(uid)
}

// releasedInBackground remembers a pod whose finalizer the background queue
// removed, if the job still has expectations: the queue outlives the syncs
// of its jobs, and an entry made for a job already forgotten (gone, or
// deleted and its expectations dropped) would stay for good. Without the
// entry, at worst a sync patches the pod once more, which is harmless.
func (e *expectations) releasedInBackground(job types.UID, pod *jobpod.Pod, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if j := e.jobs[job]; j != nil {
		j.finalizers[pod.UID] = now
	}
}

// unpatched returns the pods whose finalizer this process has not removed
// already, in their order.
func (e *expectations) unpatched(job types.UID, pods []*jobpod.Pod) []*jobpod.Pod {
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
// gone or has no tracking finalizer) and those older than
// finalizerExpectationTimeout.
func (e *expectations) observeFinalizers(job types.UID, pods []*jobpod.Pod, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	j := e.jobs[job]
	if j == nil || len(j.finalizers) == 0 {
		return
	}
	keep := make(map[types.UID]time.Time, len(j.finalizers))
	for _, pod := range pods {
		if at, ok := j.finalizers[pod.UID]; ok && pod.Tracked && now.Sub(at) <= finalizerExpectationTimeout {
			keep[pod.UID] = at
		}
	}
	j.finalizers = keep
}

// jobStale reports whether the cached job is older than this process's last
// status write. resourceVersions are etcd revisions, compared as numbers;
// one that is not a number is taken as current.
func (e *expectations) jobStale(uid types.UID, cachedVersion string) bool {
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
