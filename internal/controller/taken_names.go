package controller

import (
	"k8s.io/apimachinery/pkg/types"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// A job's state (job_state.go) remembers the pod names a create found
// taken by a pod the job does not control and the cache does not show (a
// pod without the job's labels, say): for each such index, the attempt
// past the taken name. Pods the cache shows are read again on every sync
// (nameFloors).

// takeName records that the name of the index's attempt is taken.
func (t *jobStates) takeName(job types.UID, index, attempt int32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.state(job)
	if j.takenNames == nil {
		j.takenNames = map[int32]int32{}
	}
	j.takenNames[index] = max(j.takenNames[index], attempt+1)
}

// takenFloors returns a copy of the job's taken names' floors merged into
// into (which may be nil), and the result.
func (t *jobStates) takenFloors(job types.UID, into map[int32]int32) map[int32]int32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.jobs[job]
	if j == nil {
		return into
	}
	for index, attempt := range j.takenNames {
		if into == nil {
			into = map[int32]int32{}
		}
		into[index] = max(into[index], attempt)
	}
	return into
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
