package controller

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// defaultBackoffLimit is batch/v1's default when backoffLimitPerIndex is unset.
const defaultBackoffLimit = 6

// maxUncountedPods bounds status.uncountedTerminatedPods, as upstream's
// MaxUncountedPods: a sync records no more failed pods once the list is
// this long; the rest are recorded once these are counted.
const maxUncountedPods = 500

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
// these phases.
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

// holdCounters lets a status that only moves counters wait, unless this
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
	if left := since.Add(statusCounterInterval).Sub(s.now); left > 0 {
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

// readRecordedResults reads what earlier syncs recorded: the uncounted pods
// and the index sets, without the indexes the job no longer runs (an
// elastic job scaled down). An index set that cannot be read (someone wrote
// the status by hand) is reported and rebuilt from the pods.
func (s *syncState) readRecordedResults() {
	// Succeeded UIDs (and those of ignored failures after failures in
	// place, recordFinishedPods) are dropped once their pods are released
	// (countReleasedPods); so are those of versions that recorded every
	// succeeded pod, whose indexes were recorded in the same write.
	s.uncountedFailed, s.uncountedSucceeded = sets.New[types.UID](), sets.New[types.UID]()
	if u := s.status.UncountedTerminatedPods; u != nil {
		s.uncountedFailed, s.uncountedSucceeded = sets.New(u.Failed...), sets.New(u.Succeeded...)
	}
	var err error
	if s.completed, err = indexset.Parse(s.status.CompletedIndexes, 0); err != nil {
		s.plan.warn("InvalidStatus", "Ignored unreadable status.completedIndexes %q: %v; rebuilt it from the pods", s.status.CompletedIndexes, err)
		s.completed, s.rebuildCompleted = indexset.Set{}, true
	}
	if s.job.Spec.BackoffLimitPerIndex != nil && s.status.FailedIndexes != nil {
		if s.failedIndexes, err = indexset.Parse(*s.status.FailedIndexes, 0); err != nil {
			s.plan.warn("InvalidStatus", "Ignored unreadable status.failedIndexes %q: %v; rebuilt it from the pods", *s.status.FailedIndexes, err)
			s.failedIndexes, s.rebuildFailed = indexset.Set{}, true
		}
	}
	s.completed, s.failedIndexes = s.completed.Intersect(s.wanted), s.failedIndexes.Intersect(s.wanted)
	s.completedBefore, s.failedBefore = s.completed.Len(), s.failedIndexes.Len()
}

// countReleasedPods moves a recorded failed pod whose finalizer is gone (or
// the pod with it) into status.failed, and forgets a recorded succeeded one
// (its index and its failures in place are counted already). The cache
// never forgets a pod it saw except through its deletion, so "absent"
// means deleted, never "not seen yet".
func (s *syncState) countReleasedPods() {
	if s.uncountedFailed.Len() == 0 && s.uncountedSucceeded.Len() == 0 {
		return
	}
	// The recorded pods are at most maxUncountedPods, the pods all of the
	// job's: each pod is looked up among the recorded ones.
	held := sets.New[types.UID]()
	for _, pod := range s.pods {
		if pod.Tracked && s.recorded(pod) {
			held.Insert(pod.UID)
		}
	}
	for _, uid := range sets.List(s.uncountedFailed) {
		if !held.Has(uid) {
			s.uncountedFailed.Delete(uid)
			s.status.Failed++
		}
	}
	for _, uid := range sets.List(s.uncountedSucceeded) {
		if !held.Has(uid) {
			s.uncountedSucceeded.Delete(uid)
		}
	}
}

// groupPodsByIndex sorts the pods into their indexes. A pod without a valid
// index, or of an index the job does not run (any more), is deleted without
// counting it.
//
// Most indexes have one pod: their states come from one allocation, and an
// index's first pod is a slice of s.pods itself (of capacity one, so that a
// second pod's append copies it out rather than write into s.pods).
func (s *syncState) groupPodsByIndex() {
	s.indexes = newIndexTable(s.job.Spec.Completions, len(s.pods))
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

// rebuildUnreadableIndexSets recovers an index set the status could not
// give: an index is completed if one of its pods succeeded, failed if its
// latest pod failed it (classifyFailure's FailsIndex, the same decision
// recordFinishedPods makes).
func (s *syncState) rebuildUnreadableIndexSets() {
	s.indexes.each(func(ix int32, st *indexState) {
		if s.rebuildCompleted && hasSucceededPod(st) {
			s.completed = s.completed.Add(ix)
		}
	})
	if !s.rebuildFailed {
		return
	}
	s.indexes.each(func(ix int32, st *indexState) {
		if !s.completed.Has(ix) && s.classify(st.latest).FailsIndex {
			s.failedIndexes = s.failedIndexes.Add(ix)
		}
	})
}

func hasSucceededPod(st *indexState) bool {
	for _, pod := range st.pods {
		if pod.Phase == corev1.PodSucceeded {
			return true
		}
	}
	return false
}

// recordFinishedPods records the pods that finished since the last status:
// a succeeded pod by adding its index to the completed ones, a failed one by
// its UID in uncountedTerminatedPods (at most maxUncountedPods of them). A
// pod's finalizer goes only once the status that records it is written.
// The failures a pod had in place go into status.failed in the write that
// records its UID (a succeeded pod's too, then), so that the UID says they
// are counted; a Stopped pod, whose in-place failures failed its index, is
// recorded while it still runs.
func (s *syncState) recordFinishedPods() {
	// Only a tracked pod not recorded yet has an end to record: the running
	// pods and those finished since the last status, however many pods the
	// job has. A success whose index is finished already is recorded (or
	// comes too late): its finalizer may go long after, when the client has
	// time (releaseFinalizers). They are taken by index, then attempt.
	var todo []*jobpod.Pod
	for _, pod := range s.grouped {
		if pod.Tracked && !s.recorded(pod) && !s.oldGeneration(pod) &&
			(pod.Phase != corev1.PodSucceeded || !s.indexFinished(pod.Index)) {
			todo = append(todo, pod)
		}
	}
	slices.SortStableFunc(todo, func(a, b *jobpod.Pod) int {
		return cmp.Or(cmp.Compare(a.Index, b.Index), cmp.Compare(a.Attempt, b.Attempt))
	})
	for _, pod := range todo {
		ix := pod.Index
		if pod.Phase == corev1.PodSucceeded {
			s.recordSucceeded(ix, pod)
			continue
		}
		if s.uncountedFull() {
			continue
		}
		f := s.classify(pod)
		switch {
		case !f.Failed:
			continue
		case f.RestartsJob && s.job.Spec.MaxRestarts != nil:
			continue // decideRestart
		case f.Stopped && s.indexFinished(ix):
			// Failures after the index finished are not counted; its
			// pods go uncounted (keepOnePodPerIndex).
			continue
		case f.Ignored && f.InPlace > 0 && !s.indexFinished(ix):
			// Its end counts nowhere, as a success's: its UID goes with
			// the succeeded ones, with the failures it had in place.
			s.countInPlace(ix, f)
			s.uncountedSucceeded.Insert(pod.UID)
			continue
		case f.Ignored:
			s.ignoredFailures = append(s.ignoredFailures, pod)
			continue
		}
		s.recordFailed(ix, pod, f)
		if m := f.FailsJob(); m != nil && s.failJob == nil {
			s.failJob = m
		}
		if f.FailsIndex && !s.completed.Has(ix) && !s.failedIndexes.Has(ix) {
			s.failedIndexes = s.failedIndexes.Add(ix)
			s.indexFailures = append(s.indexFailures, fmt.Sprintf("Index %d failed for good after %s: %s", ix, attempts(pod.Attempt+1), whyFailed(pod, f)))
		}
	}
}

// recordSucceeded records a succeeded pod by its index, unless the index
// finished already; a pod that had failures in place also by its UID, in
// the same write that counts them.
func (s *syncState) recordSucceeded(ix int32, pod *jobpod.Pod) {
	if s.indexFinished(ix) {
		return
	}
	if f := s.classify(pod); f.InPlace > 0 {
		if s.uncountedFull() {
			return // recorded once the UIDs before it are released
		}
		s.countInPlace(ix, f)
		s.uncountedSucceeded.Insert(pod.UID)
	}
	s.completed = s.completed.Add(ix)
	s.plan.recorded = append(s.plan.recorded, finishedPod{index: ix, succeeded: true})
}

// recorded: the pod's UID is in uncountedTerminatedPods (its end, or its
// failures in place, are in the status this sync computes).
func (s *syncState) recorded(pod *jobpod.Pod) bool {
	return s.uncountedFailed.Has(pod.UID) || s.uncountedSucceeded.Has(pod.UID)
}

// uncountedFull: uncountedTerminatedPods holds maxUncountedPods UIDs, and
// no more pod is recorded in this sync.
func (s *syncState) uncountedFull() bool {
	return s.uncountedFailed.Len()+s.uncountedSucceeded.Len() >= maxUncountedPods
}

// recordFailed records a failed pod of index ix by its UID in
// uncountedTerminatedPods, with its failures in place (f).
func (s *syncState) recordFailed(ix int32, pod *jobpod.Pod, f jobpod.Failure) {
	s.countInPlace(ix, f)
	s.uncountedFailed.Insert(pod.UID)
	s.plan.recorded = append(s.plan.recorded, finishedPod{index: ix})
}

// countInPlace adds to status.failed the failures a pod of index ix had in
// place, as its end is recorded (Failure.InPlaceRecorded); none once the
// index finished: failures after that are not counted.
func (s *syncState) countInPlace(ix int32, f jobpod.Failure) {
	if !s.indexFinished(ix) {
		s.status.Failed += f.InPlaceRecorded()
	}
}

// failStuckPods asks for the pods still terminating past the job's
// terminatingTimeoutSeconds to be written Failed (plan.failStuck); the
// sync that sees them Failed records them. A sync before the first of the
// others' deadlines comes back then.
func (s *syncState) failStuckPods() {
	if s.job.Spec.TerminatingTimeoutSeconds == nil {
		return
	}
	for _, pod := range s.pods {
		at := jobpod.TerminatingDeadline(s.job, pod)
		switch {
		case at.IsZero():
		case !at.After(s.now):
			s.plan.failStuck = append(s.plan.failStuck, pod)
		default:
			s.plan.requeue(at.Sub(s.now))
		}
	}
}

// failureOf is jobpod.Classify for a pod of this sync (with the matched
// rule, whose retry delay the index's next attempt waits). A pod recorded
// as failed stays a counted failure of its index even if it then
// succeeded: a pod deleted under TerminatingOrFailed is recorded at once
// and may still exit 0 afterwards; its index has lost that attempt all the
// same.
func (s *syncState) failureOf(pod *jobpod.Pod) jobpod.Failure {
	f := s.classify(pod)
	if s.uncountedFailed.Has(pod.UID) && !f.Counted && !f.Stopped {
		return jobpod.Failure{Failed: true, Counted: true, InPlace: f.InPlace}
	}
	return f
}

// decideTarget sets FailureTarget or SuccessCriteriaMet once the job reached
// its end; once set, the end is decided and never revisited.
func (s *syncState) decideTarget() {
	if s.target = currentTarget(s.status); s.target != nil {
		return
	}
	if s.target = s.newTarget(); s.target != nil {
		setCondition(s.status, s.job.Generation, s.now, s.target.Type, metav1.ConditionTrue, s.target.Reason, s.target.Message)
	}
}

// newTarget checks the end conditions in upstream's order: a FailJob rule,
// the backoff limit, the maximal number of failed indexes, the deadline,
// the success policy, all indexes completed, all indexes finished with some
// failed. "All indexes" are the job's wanted indexes; completed and
// failedIndexes hold no other.
func (s *syncState) newTarget() *metav1.Condition {
	job := s.job
	fail := func(reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: ibjv1.ConditionFailureTarget, Reason: reason, Message: msg}
	}
	succeed := func(reason, msg string) *metav1.Condition {
		return &metav1.Condition{Type: ibjv1.ConditionSuccessCriteriaMet, Reason: reason, Message: msg}
	}
	wanted := s.wanted.Len()
	switch {
	case s.unreadableIndexes:
		return nil
	case s.failJob != nil:
		// PodFailurePolicy_<name> for a named rule (KEP-4443), with
		// upstream's message.
		return fail(s.failJob.Reason(), s.failJob.Message)
	case s.restartsExhausted != nil:
		return fail(ibjv1.ReasonMaxRestartsExceeded, s.restartsExhaustedMessage())
	case s.exceedsBackoffLimit():
		return fail(ibjv1.ReasonBackoffLimitExceeded, "Job has reached the specified backoff limit")
	case job.Spec.BackoffLimitPerIndex != nil && job.Spec.MaxFailedIndexes != nil && s.failedIndexes.Len() > int(*job.Spec.MaxFailedIndexes):
		return fail(ibjv1.ReasonMaxFailedIndexesExceeded, "Job has exceeded the specified maximal number of failed indexes")
	case deadlinePassed(job, s.now):
		return fail(ibjv1.ReasonDeadlineExceeded, "Job was active longer than specified deadline")
	case matchSuccessPolicy(job.Spec.SuccessPolicy, job.Spec.Completions, s.completed):
		return succeed(ibjv1.ReasonSuccessPolicy, "Matched rules of the success policy")
	case s.completed.Len() >= wanted:
		return succeed(ibjv1.ReasonCompletionsReached, "Reached expected number of succeeded pods")
	case s.failedIndexes.Len() > 0 && s.completed.Len()+s.failedIndexes.Len() >= wanted:
		return fail(ibjv1.ReasonFailedIndexes, "Job has failed indexes")
	}
	return nil
}

// exceedsBackoffLimit: more failed pods than backoffLimit, or, with
// restartPolicy OnFailure, as many container restarts in running pods
// (upstream's pastBackoffLimitOnFailure). With restartPolicy Never the
// failures in place of the running pods not recorded yet count beside the
// recorded ones, as upstream counts an OnFailure pod's restarts.
func (s *syncState) exceedsBackoffLimit() bool {
	job := s.job
	limit := int32(defaultBackoffLimit)
	if job.Spec.BackoffLimit != nil {
		limit = *job.Spec.BackoffLimit
	} else if job.Spec.BackoffLimitPerIndex != nil {
		limit = math.MaxInt32
	}
	inPlace := int64(0)
	for _, ix := range s.busy {
		for _, pod := range s.indexes.get(ix).active {
			if !s.uncountedFailed.Has(pod.UID) {
				inPlace += int64(jobpod.InPlaceFailures(job, pod))
			}
		}
	}
	if int64(s.status.Failed)+int64(s.uncountedFailed.Len())+inPlace > int64(limit) {
		return true
	}
	if job.Spec.Template.Spec.RestartPolicy != corev1.RestartPolicyOnFailure || limit == math.MaxInt32 {
		return false
	}
	var restarts int32
	for _, ix := range s.busy {
		for _, pod := range s.indexes.get(ix).active {
			restarts += pod.Restarts
		}
	}
	if limit == 0 {
		return restarts > 0
	}
	return restarts >= limit
}

// deadlinePassed: activeDeadlineSeconds has passed since the job started.
func deadlinePassed(job *ibjv1.IndexedBatchJob, now time.Time) bool {
	d := deadlineLeft(job, now)
	return d != nil && *d <= 0
}

// deadlineLeft is the time until activeDeadlineSeconds passes, nil without
// a deadline or before the job started.
func deadlineLeft(job *ibjv1.IndexedBatchJob, now time.Time) *time.Duration {
	if job.Spec.ActiveDeadlineSeconds == nil || job.Status.StartTime == nil {
		return nil
	}
	d := job.Status.StartTime.Add(time.Duration(*job.Spec.ActiveDeadlineSeconds) * time.Second).Sub(now)
	return &d
}

// stopPods ends the pods of a job that reached its end. When it fails, as
// upstream, every pod that has not finished counts as failed and is
// deleted; when it succeeds, lingering pods go without being counted.
func (s *syncState) stopPods() {
	failing := s.target.Type == ibjv1.ConditionFailureTarget
	for _, ix := range s.indexOrder() {
		st := s.indexes.get(ix)
		s.terminating += st.terminating
		for _, pod := range st.pods {
			if pod.Finished() || s.oldGeneration(pod) {
				continue // recorded, or ignored; or ended by a restart (endOldGeneration)
			}
			switch {
			case failing:
				if pod.Tracked && !s.uncountedFailed.Has(pod.UID) && !s.uncountedFull() {
					s.recordFailed(ix, pod, jobpod.Failure{InPlace: jobpod.InPlaceFailures(s.job, pod)})
				}
				if pod.DeletionTimestamp == nil {
					s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, reason: s.target.Reason})
					s.terminating++
				}
			case pod.DeletionTimestamp == nil && s.uncountedFailed.Has(pod.UID):
				s.deleteCounted(pod, s.target.Reason)
			case pod.DeletionTimestamp == nil:
				s.deleteUncounted(pod, s.target.Reason)
			case pod.Finalized() && !s.uncountedFailed.Has(pod.UID):
				s.plan.discard = append(s.plan.discard, pod)
			}
		}
	}
}

// deleteCounted deletes a pod recorded as failed while it ran (a Stopped
// pod): its finalizer goes once the status that records it is written.
func (s *syncState) deleteCounted(pod *jobpod.Pod, reason string) {
	s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, reason: reason})
	s.terminating++
}

// deleteUncounted deletes a pod whose end must not count: its finalizer
// goes first.
func (s *syncState) deleteUncounted(pod *jobpod.Pod, reason string) {
	s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, stripFinalizer: true, reason: reason})
	s.terminating++
}

// releaseFinalizers lets go of every pod whose result is recorded. The
// reconciler removes the finalizers only once the status holding their
// result is written. A pod recorded by its UID goes at once, whatever its
// end: its UID stays in the status until it is released. A failed pod is
// counted only once its tracking finalizer is gone, so that removal is on the job's way to its end; a
// succeeded pod is counted by its index already, so its finalizer goes
// later (plan.releaseLater), when the client has time. A succeeded pod of
// an index that had failed before is let go uncounted. A pod heldForRetry
// loses only its tracking finalizer (plan.countHeld): it is counted now,
// whatever becomes of the creates of its replacement, and its index-retry
// finalizer keeps it until it is no longer held.
func (s *syncState) releaseFinalizers() {
	held := s.heldForRetry()
	for _, pod := range s.pods {
		switch {
		case !pod.Finalized():
		case pod.Tracked && s.oldGeneration(pod) && !s.recorded(pod):
			// endOldGeneration lets it go.
		case held.Has(pod.UID):
			if s.recorded(pod) {
				s.countHeld(pod)
			}
		case s.recorded(pod), !pod.Tracked:
			// Recorded, or counted already and no longer held.
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		case pod.Phase != corev1.PodSucceeded || !pod.IndexOK || !s.wanted.Has(pod.Index):
		case s.completed.Has(pod.Index):
			s.plan.releaseLater = append(s.plan.releaseLater, pod)
			if s.settles(pod) {
				s.plan.settleReleased = append(s.plan.settleReleased, pod)
			}
		case s.failedIndexes.Has(pod.Index):
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		}
	}
	for _, pod := range s.ignoredFailures {
		if !held.Has(pod.UID) {
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		} else {
			s.countHeld(pod)
		}
	}
}

// countHeld lets a held pod's tracking finalizer go and keeps its
// index-retry finalizer. A pod made before the index-retry finalizer
// existed has none: it keeps its tracking finalizer until it is no longer
// held, as upstream keeps its pods.
func (s *syncState) countHeld(pod *jobpod.Pod) {
	if pod.Tracked && pod.Held {
		s.plan.countHeld = append(s.plan.countHeld, pod)
	}
}

// heldForRetry are the failed pods that keep their index-retry finalizer
// although their result is recorded: with backoffLimitPerIndex, the latest
// pod of an index still to be retried carries the index's failure counts
// and the time its backoff runs from. A deleted pod (evicted, or removed by
// a user) goes from the API server as soon as its finalizers do; without it
// the next pod of the index would start at attempt 0 with no failures and
// no delay. It is let go once the replacement exists (it is then the
// latest), the index finished, or the job reached its end, as upstream's
// podsWithDelayedDeletionPerIndex.
func (s *syncState) heldForRetry() sets.Set[types.UID] {
	held := sets.New[types.UID]()
	if s.job.Spec.BackoffLimitPerIndex == nil || s.target != nil {
		return held
	}
	s.indexes.each(func(ix int32, st *indexState) {
		if !s.completed.Has(ix) && !s.failedIndexes.Has(ix) && s.failureOf(st.latest).Failed {
			held.Insert(st.latest.UID)
		}
	})
	return held
}

// decideEnd is the second phase of the end: Complete or Failed once nothing
// is left running or terminating, every finished pod is counted, and the
// cache is current.
func (s *syncState) decideEnd() {
	s.terminating += s.unwantedPods
	if s.target == nil || s.terminating > 0 || s.uncountedFailed.Len()+s.uncountedSucceeded.Len() > 0 || !s.expectationsSatisfied {
		return
	}
	c := setFinished(s.status, s.job.Generation, s.now, s.target)
	s.plan.newlyFinished = c
	s.plan.events = append(s.plan.events, finishedEvent(c))
	if ttl := s.job.Spec.TTLSecondsAfterFinished; ttl != nil {
		s.plan.requeue(time.Duration(*ttl) * time.Second)
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

// releaseFinishedJob handles a job that is Complete or Failed: it lets go of
// any pod still held by a tracking finalizer (a finished one whenever the
// client has time: every result is counted; a terminating one at once),
// removes pods still running, and deletes the job once
// ttlSecondsAfterFinished passed (the pods' finalizers go first).
func (s *syncState) releaseFinishedJob() {
	for _, pod := range s.pods {
		switch {
		case pod.Active():
			s.plan.delete = append(s.plan.delete, podDeletion{pod: pod, stripFinalizer: true, reason: "job finished"})
		case !pod.Finalized():
		case pod.Finished():
			s.plan.releaseLater = append(s.plan.releaseLater, pod)
		default: // terminating: its finalizer is all that keeps it
			s.plan.removeFinalizer = append(s.plan.removeFinalizer, pod)
		}
	}
	ttl := s.job.Spec.TTLSecondsAfterFinished
	if ttl == nil {
		return
	}
	at, ok := finishedAt(s.job)
	if !ok {
		return
	}
	if left := at.Add(time.Duration(*ttl) * time.Second).Sub(s.now); left > 0 {
		s.plan.requeue(left)
		return
	}
	s.plan.deleteJob = true
}

// isSuspended: spec.suspend is true.
func isSuspended(job *ibjv1.IndexedBatchJob) bool { return ptr.Deref(job.Spec.Suspend, false) }
