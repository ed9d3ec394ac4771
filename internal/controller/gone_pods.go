package controller

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// maxGonePerJob bounds what observeGone keeps of one job: the latest failures.
// Past a dozen failures the job-wide delay is at its cap whatever the
// backoff settings allow (spec.retryBackoff's bounds).
const maxGonePerJob = 32

// A job's state (job_state.go) remembers its failed pods that were being deleted (a
// pod deleted while it ran, evicted, preempted), so that what they said
// outlives them once their finalizer goes and the API server removes them:
// the job-wide backoff still counts their failures, as upstream's backoff
// record does in memory, and the next pod of their index is named past
// them rather than take the name of attempt 0 again. A failed pod that is
// not deleted stays in the cache, which is where syncs read it from.
// Like upstream's record, a restart forgets them; they go with the job's
// state.

// gonePod is what a sync needs of a deleted failed pod: its name, its end,
// and how its failure counts in the job-wide backoff.
type gonePod struct {
	uid        types.UID
	index      int32
	attempt    int32
	finishedAt time.Time
	// counted: the failure counted (no Ignore rule matched it); retryDelay
	// is the matched rule's retryDelaySeconds, nil when unset.
	counted    bool
	retryDelay *time.Duration
}

// failure is how the gone pod's failure counts, as jobpod.Classify said
// while the pod was there.
func (p gonePod) failure() jobpod.Failure {
	f := jobpod.Failure{Failed: true, Counted: p.counted, Ignored: !p.counted}
	if p.retryDelay != nil {
		f.Match = &jobpod.Match{RetryDelay: p.retryDelay}
	}
	return f
}

// observeGone remembers the job's deleted pods whose end is a failure, and
// returns what it remembers of those no longer among pods: the ones gone.
func (g *jobStates) observeGone(job *ibjv1.IndexedBatchJob, pods []*jobpod.Pod) []gonePod {
	g.mu.Lock()
	defer g.mu.Unlock()
	var known []gonePod
	if j := g.jobs[job.UID]; j != nil {
		known = j.gone
	}
	for _, pod := range pods {
		if pod.DeletionTimestamp == nil || !pod.IndexOK || pod.Discarded {
			continue
		}
		f := jobpod.Classify(job, pod)
		if !f.Failed {
			continue
		}
		entry := gonePod{uid: pod.UID, index: pod.Index, attempt: pod.Attempt, finishedAt: pod.FinishedAt, counted: f.Counted}
		if f.Match != nil {
			entry.retryDelay = f.Match.RetryDelay
		}
		if i := slices.IndexFunc(known, func(e gonePod) bool { return e.uid == pod.UID }); i >= 0 {
			known[i] = entry
			continue
		}
		known = append(known, entry)
	}
	if len(known) > maxGonePerJob {
		slices.SortFunc(known, func(a, b gonePod) int { return a.finishedAt.Compare(b.finishedAt) })
		known = slices.Clone(known[len(known)-maxGonePerJob:])
	}
	if len(known) == 0 {
		// The common case, on every sync: no deleted failed pod, nothing
		// to look up.
		return nil
	}
	g.state(job.UID).gone = known
	// Which of the (at most maxGonePerJob) remembered pods the sync still
	// has, without a set of all its pods.
	present := make(map[types.UID]bool, len(known))
	for _, e := range known {
		present[e.uid] = false
	}
	for _, pod := range pods {
		if _, ok := present[pod.UID]; ok {
			present[pod.UID] = true
		}
	}
	var gone []gonePod
	for _, e := range known {
		if !present[e.uid] {
			gone = append(gone, e)
		}
	}
	return gone
}

// goneFloors adds to floors (which may be nil) the attempts past the gone
// pods' names, and returns the result.
func goneFloors(gone []gonePod, floors map[int32]int32) map[int32]int32 {
	for _, p := range gone {
		if floors == nil {
			floors = map[int32]int32{}
		}
		floors[p.index] = max(floors[p.index], p.attempt+1)
	}
	return floors
}
