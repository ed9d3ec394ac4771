package controller

import (
	"cmp"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// syncInput is what the decision core sees: the job, its pods from the cache
// (owned by the job), the time, whether the cache has caught up with this
// controller's own creates and deletes, and what the reconciler found of the
// job's headless Service.
type syncInput struct {
	job                   *ibjv1.IndexedBatchJob
	pods                  []*jobpod.Pod
	now                   time.Time
	backoff               Backoff
	expectationsSatisfied bool
	// lastStatusWrite is when this process last wrote the job's status,
	// zero if it has not.
	lastStatusWrite time.Time
	// heldStart is the startTime of the job's first status, held back
	// (holdCounters) and not written yet; zero if none.
	heldStart time.Time
	// lastCreateRefused is when the API server last refused one of the
	// job's pod creates (this process's record), zero if it has not since
	// a create went through.
	lastCreateRefused time.Time
	// mutatedUntil is when the job may create a pod again after a create
	// came back mutated by admission (mutated.go); zero if none did
	// within a minute. Not zero, the job creates one pod a sync.
	mutatedUntil time.Time
	// serverBusy: the API server is busy (internal/serverload): a status
	// that only moved counters waits busyStatusInterval.
	serverBusy bool
	// service is what the reconciler found of the job's headless Service
	// (peer DNS); the zero value leaves condition PeerDNSReady alone.
	service peerService
	// gang is what the reconciler found of the job's Workload and PodGroup
	// (gangScheduling); the zero value holds no pod and leaves condition
	// PodGroupReady alone.
	gang podGroup
	// nameFloors are, by index, the lowest attempt whose pod name no pod
	// the job does not control holds (taken_names.go), nor a gone pod
	// held; nil when none.
	nameFloors map[int32]int32
	// gone are the job's deleted failed pods that the API server no
	// longer has (gone_pods.go): the job-wide backoff counts them.
	gone []gonePod
	// failureSeen is when the pod cache saw the job's latest failure that
	// no sync has counted yet, zero if none or unknown.
	failureSeen time.Time
	// memoryCap is the most memory the namespace's LimitRanges let a
	// container have (read only for a job with retryResources.onOOMKilled),
	// nil when none sets a maximum.
	memoryCap *jobpod.MemoryCap
	// settled are the indexes of the job's settled pods that the pod cache
	// keeps out of pods (plan.settle), and settledSuccess the latest end
	// among them; empty when pods are all of the job's.
	settled        indexset.Set
	settledSuccess time.Time
	// failures is the job's failure record (failure_record.go), which the
	// sync adds the failed pods it sees to; nil leaves it out (and every
	// pod avoids no node). recordRefused is the API server's answer while
	// it refuses the record, "" otherwise.
	failures      *failrecord.Record
	recordRefused string
	// sparseIndexes keeps the indexes' states in a map whatever the job's
	// size (newIndexTable), as the tests of the decisions ask for; the
	// reconciler leaves it false.
	sparseIndexes bool
}

// syncState is one sync's view of its job: what the last status recorded,
// the pods grouped by index, and what the phases of syncJob have decided so
// far. Each phase reads what the earlier ones left and adds its part.
type syncState struct {
	syncInput
	plan plan
	// status is &plan.status, the status this sync computes.
	status *ibjv1.IndexedBatchJobStatus
	// current is the job as this sync sees it: in.job, with status.restarts
	// raised if this sync restarts its pods (restart.go).
	current *ibjv1.IndexedBatchJob

	// uncountedFailed are the failed pods recorded in
	// uncountedTerminatedPods but not yet in status.failed. Succeeded pods
	// are counted by their index (completedIndexes), as upstream counts an
	// Indexed job's successes; uncountedSucceeded are only those that had
	// failures in place, which status.failed took in the write that
	// recorded them: their UIDs stay until their finalizer is gone, so
	// that no later sync records them again.
	uncountedFailed, uncountedSucceeded sets.Set[types.UID]
	completed, failedIndexes            indexset.Set
	completedBefore, failedBefore       int
	// rebuildCompleted and rebuildFailed: the status's index set could not
	// be read and is rebuilt from the pods.
	rebuildCompleted, rebuildFailed bool

	// wanted are the indexes the job runs: spec.indexes, or 0..completions-1.
	wanted indexset.Set
	// unreadableIndexes: spec.indexes could not be read (only a CRD without
	// its validation lets that through); no pod starts and the job does not
	// end, but no pod is removed either.
	unreadableIndexes bool

	indexes indexTable
	// jobAvoided are the nodes every later pod of the job avoids
	// (failrecord.Record.Avoided), nil until a phase needs them.
	jobAvoided []string
	// order are the keys of indexes, ascending, once indexOrder sorted
	// them; busy are those with an active or terminating pod, ascending.
	order, busy []int32
	// grouped are the pods of indexes, in s.pods' order: s.pods itself when
	// every pod has a wanted index.
	grouped []*jobpod.Pod
	// unwantedPods are the unfinished pods without a valid index or of an
	// index the job does not run; they count as terminating until gone.
	unwantedPods int
	// oldPods are the pods of an earlier generation than the job's: a
	// restart ended them (restart.go). None of them is active in its index.
	oldPods []*jobpod.Pod
	// restartsExhausted is the RestartJob match that came after
	// spec.maxRestarts restarts, nil without one: it fails the job.
	restartsExhausted *jobpod.Match

	// failJob is the first FailJob match among the pods recorded in this
	// sync, nil without one.
	failJob *jobpod.Match
	// indexFailures say why each index this sync failed for good did.
	indexFailures []string
	// ignoredFailures are failed pods an Ignore rule matched.
	ignoredFailures []*jobpod.Pod
	// target is the FailureTarget or SuccessCriteriaMet condition, once set.
	target                     *metav1.Condition
	active, ready, terminating int
}

// indexState is what the pods say about one completion index.
type indexState struct {
	pods        []*jobpod.Pod // sorted by attempt
	active      []*jobpod.Pod
	terminating int
	// latest is the pod with the highest attempt; the next pod's attempt
	// number and failure counts follow from it.
	latest *jobpod.Pod
}

// syncJob is the pure decision core: from the job, its pods and the time it
// computes the new status and the actions that lead there. It makes no API
// call and reads no clock; every decision of the controller is here, in
// these phases: recording the pods that finished (sync_record.go), deciding
// the job's target (sync_target.go), stopping its pods and deciding its end
// (sync_end.go), the pods to run (manage.go) and restarts (restart.go).
func syncJob(in syncInput) plan {
	s := newSyncState(in)
	if IsFinished(in.job) {
		if s.settled.Len() > 0 {
			// Every pod still held goes now, the settled ones too.
			return plan{needAllPods: true}
		}
		s.releaseFinishedJob()
		return s.plan
	}
	if p := s.phases(); !s.needsSettledPods() {
		return p
	}
	return plan{needAllPods: true}
}

// phases runs the phases of the sync of a job that has not finished.
func (s *syncState) phases() plan {
	s.readRecordedResults()
	s.countReleasedPods()
	s.groupPodsByIndex()
	s.rebuildUnreadableIndexSets()
	s.recordFinishedPods()
	s.decideRestart()
	s.setAsideOldGeneration()
	s.endOldGeneration()
	s.failStuckPods()
	s.plan.indexFailures = s.indexFailures
	start := s.now
	if !s.heldStart.IsZero() {
		start = s.heldStart
	}
	setStartTime(s.status, s.job, start)
	s.decideTarget()
	if s.target != nil {
		s.stopPods()
	} else {
		s.runPods()
	}
	s.releaseFinalizers()
	s.decideEnd()
	s.reportService()
	s.reportGang()
	s.reportUnschedulable()
	s.reportRecordRefused()
	s.computeStatus()
	s.holdCounters()
	return s.plan
}

// needsSettledPods: the sync decided without the job's settled pods (the
// pod cache keeps them out, in.settled) but they may matter to it. No
// phase reads a settled pod (settles) while its index stays completed; a
// restart of the job's pods, an index set rebuilt from the pods, or a job
// scaled down makes the sync read all of its pods again, as does the end
// of the job.
func (s *syncState) needsSettledPods() bool {
	return s.settled.Len() > 0 && (s.job.Spec.MaxRestarts != nil || !s.completed.Contains(s.settled))
}

// settles: no later sync of the job needs to read the pod while its index
// stays completed, and the pod cache may keep it out of them: a success of
// a completed index whose UID is not in uncountedTerminatedPods, not
// deleted. The pod settles once the status that records its index is
// written and it holds no finalizer of the operator's (plan.settle), or
// its finalizer is queued for the background (plan.settleReleased), which
// removes it whatever the syncs see. Only the pods of a job without
// spec.maxRestarts settle, whose pods are all of one generation.
func (s *syncState) settles(pod *jobpod.Pod) bool {
	return pod.Phase == corev1.PodSucceeded && pod.DeletionTimestamp == nil && !pod.Discarded &&
		s.job.Spec.MaxRestarts == nil && s.completed.Has(pod.Index) && !s.recorded(pod)
}

// statusCounterInterval is how long after a job's last status write a
// status that only moves counters may wait for the next one. Upstream's
// Job controller syncs a job at most once a second after pod events
// (syncJobBatchPeriod) and writes its counters then; this operator syncs at
// once, so that pods are replaced without delay, and holds back only the
// counter writes: a running job's status costs at most one write a second
// for its counters, and a short job's no more than upstream's.
const statusCounterInterval = time.Second

// holdCounters lets a status that only moves counters wait
// (statusCounterInterval, busyStatusInterval while the API server is
// busy), unless this
// sync releases finalizers that need it written: a condition, a failure or
// a pod whose result must be recorded before its finalizer goes are never
// held back. A held status is computed again by the next sync, from the
// same pods, which keep their finalizers until it is written.
//
// The first status of a job this process starts (its startTime, phase
// Running and counters: firstStatusOnly) waits as well, for
// statusCounterInterval from its startTime, which the next syncs keep
// (plan.holdStart, syncInput.heldStart): a job whose pods end within a
// second has its status written once, with its end.
func (s *syncState) holdCounters() {
	if len(s.plan.removeFinalizer) > 0 || len(s.plan.discard) > 0 {
		return
	}
	since := s.lastStatusWrite
	switch {
	case firstStatusOnly(&s.job.Status, s.status):
		since = s.status.StartTime.Time
		s.plan.holdStart = since
	case since.IsZero() || !onlyCountersMoved(&s.job.Status, s.status):
		return
	}
	interval := statusCounterInterval
	if s.serverBusy {
		interval = busyStatusInterval
	}
	if left := since.Add(interval).Sub(s.now); left > 0 {
		s.plan.holdStatus = left
	} else {
		s.plan.holdStart = time.Time{}
	}
}

func newSyncState(in syncInput) *syncState {
	s := &syncState{syncInput: in, plan: plan{status: *in.job.Status.DeepCopy()}, current: in.job}
	s.status = &s.plan.status
	s.status.ObservedGeneration = in.job.Generation
	s.backoff = in.backoff.ForJob(in.job)
	set, err := indexset.OfJob(in.job)
	if err != nil {
		s.wanted = indexset.Range(0, in.job.Spec.Completions-1)
		s.plan.warn("InvalidIndexes", "Started no pod: spec.indexes %q cannot be read: %v", *in.job.Spec.Indexes, err)
		s.unreadableIndexes = true
	} else {
		s.wanted = set
	}
	return s
}

// groupPodsByIndex sorts the pods into their indexes. A pod without a valid
// index, or of an index the job does not run (any more), is deleted without
// counting it.
//
// Most indexes have one pod: their states come from one allocation, and an
// index's first pod is a slice of s.pods itself (of capacity one, so that a
// second pod's append copies it out rather than write into s.pods).
func (s *syncState) groupPodsByIndex() {
	s.indexes = newIndexTable(s.job.Spec.Completions, len(s.pods), s.sparseIndexes)
	states := make([]indexState, 0, len(s.pods))
	// several are the indexes with more than one pod, to sort by attempt.
	var several []*indexState
	s.grouped = s.pods
	for k, pod := range s.pods {
		if !pod.IndexOK || !s.wanted.Has(pod.Index) {
			if len(s.grouped) == len(s.pods) {
				s.grouped = slices.Clone(s.pods[:k])
			}
			s.removeUnwantedPod(pod)
			continue
		}
		if len(s.grouped) < len(s.pods) {
			s.grouped = append(s.grouped, pod)
		}
		if !pod.Finalized() && s.settles(pod) {
			// Its index was completed before this sync: the status that
			// records it is written.
			s.plan.settle = append(s.plan.settle, pod)
		}
		one := s.pods[k : k+1 : k+1]
		st := s.indexes.get(pod.Index)
		if st == nil {
			states = append(states, indexState{pods: one, latest: pod})
			st = &states[len(states)-1]
			s.indexes.set(pod.Index, st)
		} else {
			st.pods = append(st.pods, pod)
			if pod.Attempt > st.latest.Attempt {
				st.latest = pod
			}
		}
		busy := len(st.active) > 0 || st.terminating > 0
		switch {
		case !pod.Active():
			if pod.Terminating() {
				st.terminating++
			}
		case st.active == nil:
			st.active = one
		default:
			st.active = append(st.active, pod)
		}
		if !busy && (len(st.active) > 0 || st.terminating > 0) {
			s.busy = append(s.busy, pod.Index)
		}
		if len(st.pods) == 2 {
			several = append(several, st)
		}
	}
	for _, st := range several {
		slices.SortStableFunc(st.pods, func(a, b *jobpod.Pod) int { return cmp.Compare(a.Attempt, b.Attempt) })
	}
	slices.Sort(s.busy)
}

// indexOrder is the indexes that have a pod, ascending. Only the phases
// that end pods need them all (stopPods, a restart's); sorted on first use.
func (s *syncState) indexOrder() []int32 {
	if s.order == nil {
		s.order = make([]int32, 0, s.indexes.len())
		s.indexes.each(func(ix int32, _ *indexState) { s.order = append(s.order, ix) })
		if s.indexes.sparse != nil {
			slices.Sort(s.order)
		}
	}
	return s.order
}

// removeUnwantedPod deletes, uncounted, a pod whose index is malformed or
// not among the job's indexes. Until it is gone it counts as terminating.
func (s *syncState) removeUnwantedPod(pod *jobpod.Pod) {
	reason := "invalid completion index"
	if pod.IndexOK {
		reason = "index removed"
	}
	if pod.DeletionTimestamp == nil || pod.Finalized() {
		d := podDeletion{pod: pod, stripFinalizer: true, reason: reason}
		switch {
		case pod.DeletionTimestamp != nil:
		case !pod.IndexOK:
			d.event = ptr.To(warningEvent("InvalidPodIndex", "Deleted pod %s without counting it: its completion index %q is not in 0..%d",
				pod.Name, pod.BadIndex, s.job.Spec.Completions-1))
		default:
			d.event = ptr.To(normalEvent("IndexRemoved", "Deleted pod %s without counting it: index %d is not among the job's indexes (completions %d)",
				pod.Name, pod.Index, s.job.Spec.Completions))
		}
		s.plan.delete = append(s.plan.delete, d)
	}
	if !pod.Finished() {
		s.unwantedPods++
	}
}

// computeStatus writes what the phases decided into the status.
func (s *syncState) computeStatus() {
	setPodCounts(s.status, s.active, s.ready, s.terminating)
	setIndexSets(s.status, s.job, s.completed, s.failedIndexes)
	setSucceeded(s.status, s.completed)
	setUncounted(s.status, s.uncountedSucceeded, s.uncountedFailed)
	setPhase(s.status)
	s.plan.newlyCompleted = max(s.completed.Len()-s.completedBefore, 0)
	s.plan.newlyFailedIndexes = max(s.failedIndexes.Len()-s.failedBefore, 0)
}

// isSuspended: spec.suspend is true.
func isSuspended(job *ibjv1.IndexedBatchJob) bool { return ptr.Deref(job.Spec.Suspend, false) }
