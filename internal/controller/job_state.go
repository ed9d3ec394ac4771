package controller

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// jobStates is what the controller remembers of each job between its
// syncs: one jobState per job UID, under one lock, which goes in one
// forget when the job is found gone, being deleted, or created again under
// its name (getJob). Its parts are kept by their own files: what the cache
// has yet to show of this process's writes (expectations.go), the events a
// sync held back (event_pace.go), pod names found taken (taken_names.go),
// deleted failed pods that are gone (gone_pods.go), a Service name found
// taken (service.go) and what the job's Workload and PodGroup were found
// to be (gang.go). It also maps each job's namespaced name to its UID.
//
// Two stores stay apart, for what they are keyed by: the ranked queue's
// (order.go), keyed by the queue's namespaced names and kept from a job's
// first event, before the job is read; and the background finalizer
// releases (release.go), a queue of pods that outlives their job by design.
type jobStates struct {
	mu   sync.Mutex
	jobs map[types.UID]*jobState
	// uids are the UIDs of the jobs getJob read, by namespaced name.
	uids map[types.NamespacedName]types.UID
}

// jobState is what is remembered of one job.
type jobState struct {
	// key is the job's namespaced name, once getJob read the job.
	key types.NamespacedName
	jobExpectations
	events eventPace
	// takenNames are, by index, the attempts past the pod names a create
	// found taken (taken_names.go), nil when none.
	takenNames map[int32]int32
	// gone are the job's deleted failed pods (gone_pods.go).
	gone []gonePod
	// takenService is the headless Service name found taken by a Service
	// the job does not control, until takenServiceUntil (service.go).
	takenService      string
	takenServiceUntil time.Time
	// gang is what ensureGang last found of the job's Workload and
	// PodGroup, believed until gangUntil (gang.go).
	gang      podGroup
	gangUntil time.Time
	// failures is the job's failure record (failure_record_store.go).
	failures *jobFailures
	// createMutated is when a create of the job last came back mutated
	// by admission, mutatedInARow how many did since one came back as
	// asked for, pacedCreate when the job last created a pod since
	// (mutated.go).
	createMutated time.Time
	mutatedInARow int32
	pacedCreate   time.Time
}

func newJobStates() *jobStates {
	return &jobStates{jobs: map[types.UID]*jobState{}, uids: map[types.NamespacedName]types.UID{}}
}

// state is the job's state, made if it has none; the caller holds s.mu.
func (s *jobStates) state(uid types.UID) *jobState {
	j := s.jobs[uid]
	if j == nil {
		j = &jobState{jobExpectations: jobExpectations{creates: map[string]time.Time{}, finalizers: map[types.UID]finalizerRemoval{}}}
		s.jobs[uid] = j
	}
	return j
}

// seen records that the job under key has UID uid, and gives it a state,
// so that what the background queues record against it (releasedInBackground)
// is kept until forget. It forgets the state of an earlier job of the same
// name.
func (s *jobStates) seen(key types.NamespacedName, uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.uids[key]; ok && old != uid {
		delete(s.jobs, old)
	}
	s.uids[key] = uid
	s.state(uid).key = key
}

// gone forgets the job under key, found gone.
func (s *jobStates) gone(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if uid, ok := s.uids[key]; ok {
		delete(s.jobs, uid)
		delete(s.uids, key)
	}
}

// forget drops everything remembered of the job with UID uid: it is being
// deleted, or gone. Its name stays mapped to it until seen maps it to
// another job or gone forgets it.
func (s *jobStates) forget(uid types.UID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.jobs, uid)
}

// keyOf is the namespaced name of the job with UID uid, if getJob read it.
func (s *jobStates) keyOf(uid types.UID) (types.NamespacedName, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if j := s.jobs[uid]; j != nil && j.key.Name != "" {
		return j.key, true
	}
	return types.NamespacedName{}, false
}

// sizes reports how many jobs have a state and what their parts hold, for
// trackedEntries: the creates and finalizer removals waited for, the jobs
// with events held back, with taken pod names, with gone pods, with a
// taken Service name and with a gang's minCount remembered (expired ones
// count until their job goes).
func (s *jobStates) sizes() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{"job_states": len(s.jobs), "job_uids": len(s.uids), "expected_creates": 0, "expected_finalizers": 0,
		"paced_events": 0, "taken_pod_names": 0, "gone_pods": 0, "taken_services": 0, "gangs": 0}
	count := func(store string, has bool) {
		if has {
			out[store]++
		}
	}
	for _, j := range s.jobs {
		out["expected_creates"] += len(j.creates)
		out["expected_finalizers"] += len(j.finalizers)
		count("paced_events", j.events.holds())
		count("taken_pod_names", len(j.takenNames) > 0)
		count("gone_pods", len(j.gone) > 0)
		count("taken_services", j.takenService != "")
		count("gangs", !j.gangUntil.IsZero())
	}
	return out
}

// serviceTaken reports whether the job's headless Service name was found
// taken less than serviceRecheckInterval before now.
func (s *jobStates) serviceTaken(uid types.UID, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[uid]
	return j != nil && j.takenService != "" && now.Before(j.takenServiceUntil)
}

// takeService remembers that the job's headless Service name is taken,
// until now plus serviceRecheckInterval.
func (s *jobStates) takeService(uid types.UID, name string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.state(uid)
	j.takenService, j.takenServiceUntil = name, now.Add(serviceRecheckInterval)
}

// gangCurrent is what was found of the job's Workload and PodGroup less
// than gangRecheckInterval before now, if their gang was then given
// minCount; false when that is not known.
func (s *jobStates) gangCurrent(uid types.UID, minCount int32, now time.Time) (podGroup, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.jobs[uid]
	if j == nil || j.gang.minCount != minCount || !now.Before(j.gangUntil) {
		return podGroup{}, false
	}
	return j.gang, true
}

// gangGiven remembers what was found of the job's Workload and PodGroup
// at now (ready, with their gang's minCount).
func (s *jobStates) gangGiven(uid types.UID, pg podGroup, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j := s.state(uid)
	j.gang, j.gangUntil = pg, now.Add(gangRecheckInterval)
}
