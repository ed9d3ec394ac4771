package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// takenNames remembers, per job, the pod names a create found taken by a
// pod the job does not control and the cache does not show (a pod without
// the job's labels, say): for each such index, the attempt past the taken
// name. Pods the cache shows are read again on every sync (nameFloors); a
// job's entry goes with the job.
type takenNames struct {
	mu   sync.Mutex
	jobs map[types.UID]map[int32]int32
}

func newTakenNames() *takenNames { return &takenNames{jobs: map[types.UID]map[int32]int32{}} }

// take records that the name of the index's attempt is taken.
func (t *takenNames) take(job types.UID, index, attempt int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	floors := t.jobs[job]
	if floors == nil {
		floors = map[int32]int32{}
		t.jobs[job] = floors
	}
	floors[index] = max(floors[index], attempt+1)
}

// floors returns a copy of the job's floors merged into into (which may be
// nil), and the result.
func (t *takenNames) floors(job types.UID, into map[int32]int32) map[int32]int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for index, attempt := range t.jobs[job] {
		if into == nil {
			into = map[int32]int32{}
		}
		into[index] = max(into[index], attempt)
	}
	return into
}

// forget drops what is known of a job that is gone.
func (t *takenNames) forget(job types.UID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.jobs, job)
}

// size is how many jobs have taken names, for trackedEntries.
func (t *takenNames) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.jobs)
}

// nameFloors are, by index, the attempts past the pod names that pods the
// job does not control hold (pods labelled with its name: left by a deleted
// job of the same name): the job's own pods of that index start past them,
// so that it runs at once rather than wait for them to go.
func nameFloors(foreign []*jobpod.Pod) map[int32]int32 {
	var floors map[int32]int32
	for _, pod := range foreign {
		if !pod.IndexOK {
			continue
		}
		if floors == nil {
			floors = map[int32]int32{}
		}
		floors[pod.Index] = max(floors[pod.Index], pod.Attempt+1)
	}
	return floors
}
