package kubectlibj

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/failrecord"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// podScan gathers, a page of pods at a time, what the per-index view needs:
// the latest pod of each index, how many pods each index has left, and
// the ends the job-wide backoff counts.
type podScan struct {
	job    *ibjv1.IndexedBatchJob
	latest map[int32]*podFacts
	seen   map[int32]int32
	// ends feed the job-wide backoff of a job without
	// backoffLimitPerIndex: failures since the last success.
	ends jobpod.JobEnds
	// unindexed counts pods without a readable completion index.
	unindexed int
}

func newPodScan(job *ibjv1.IndexedBatchJob) *podScan {
	return &podScan{job: job, latest: map[int32]*podFacts{}, seen: map[int32]int32{}}
}

// add takes one pod into the scan; the pod itself is not kept.
func (s *podScan) add(pod *corev1.Pod) {
	f, ok := newPodFacts(s.job, pod)
	if !ok {
		s.unindexed++
		return
	}
	s.seen[f.Index]++
	if old := s.latest[f.Index]; old == nil || f.newer(old) {
		s.latest[f.Index] = f
	}
	s.ends.Add(f.Pod, f.failure)
}

// jobView is one job with its scanned pods at one moment: everything the
// state of an index is decided from.
type jobView struct {
	job     *ibjv1.IndexedBatchJob
	now     time.Time
	backoff jobpod.Backoff
	scan    *podScan
	// wanted are the indexes the job runs; completed and failed are its
	// status's index sets.
	wanted, completed, failed indexset.Set
	// record is the job's failure record, nil when not read.
	record *failrecord.Record
	// rowIndexes are the indexes that have a row of their own: those with
	// a pod or with recorded failures, ascending.
	rowIndexes []int32
	// end is the condition that ended the job (FailureTarget or Failed,
	// SuccessCriteriaMet or Complete), the earliest of its pair; failing
	// tells which.
	end     *metav1.Condition
	failing bool
	// globalRetryAt: without backoffLimitPerIndex, when the job-wide backoff
	// lets a replacement start; zero when nothing waits.
	globalRetryAt time.Time
}

func newJobView(job *ibjv1.IndexedBatchJob, scan *podScan, now time.Time, backoff jobpod.Backoff) *jobView {
	v := &jobView{job: job, now: now, backoff: backoff.ForJob(job), scan: scan}
	v.wanted = wantedIndexes(job)
	v.completed, _ = indexset.Parse(job.Status.CompletedIndexes, 0)
	v.failed, _ = indexset.Parse(ptr.Deref(job.Status.FailedIndexes, ""), 0)
	v.end, v.failing = jobEnd(job)
	v.globalRetryAt = scan.ends.RetryAt(v.backoff)
	v.rowIndexes = slices.Sorted(maps.Keys(scan.latest))
	return v
}

// withRecord adds the job's failure record to the view: each index it
// holds failures of gets a row of its own, which shows the last of them,
// so why an index failed is still shown once its pods are gone. The rows,
// and the work, follow the record as they follow the pods: it holds only
// indexes that failed, a bounded number of attempts each.
func (v *jobView) withRecord(rec *failrecord.Record) *jobView {
	v.record = rec
	if recorded := rec.Indexes(); len(recorded) > 0 {
		v.rowIndexes = slices.Compact(slices.Sorted(slices.Values(slices.Concat(v.rowIndexes, recorded))))
	}
	return v
}

// eachRow calls f with the state of the selected indexes, in ascending
// order: one row for each index that has a pod or recorded failures, and
// one for each run of three or more consecutive indexes without either
// that share their state and reason (IndexStatus.LastIndex is the run's
// last index). The state of such an index follows from the job's index
// sets alone (completed, failed, or neither), so the rows, and the work,
// follow the pods, the record and the intervals of those sets, not the
// number of indexes: a job of completions 2147483647 and a few pods is a
// few rows.
func (v *jobView) eachRow(selection indexset.Set, f func(IndexStatus)) {
	own := make([]int32, 0, len(v.rowIndexes))
	var ownRuns []indexset.Interval
	for _, ix := range v.rowIndexes {
		if selection.Has(ix) {
			own = append(own, ix)
			ownRuns = appendIndex(ownRuns, ix, 1)
		}
	}
	// The indexes without pods or recorded failures, split where their
	// state can change.
	podless := selection.Difference(indexset.OfIntervals(ownRuns...))
	notCompleted := podless.Difference(v.completed)
	runs := slices.Concat(
		podless.Intersect(v.completed).Intervals(),
		notCompleted.Intersect(v.failed).Intervals(),
		notCompleted.Difference(v.failed).Intervals(),
	)
	slices.SortFunc(runs, func(a, b indexset.Interval) int { return cmp.Compare(a.First, b.First) })
	for len(own) > 0 || len(runs) > 0 {
		if len(runs) == 0 || (len(own) > 0 && own[0] < runs[0].First) {
			f(v.status(own[0]))
			own = own[1:]
			continue
		}
		run := runs[0]
		runs = runs[1:]
		s := v.status(run.First)
		switch {
		case run.Last-run.First >= 2:
			s.LastIndex = ptr.To(run.Last)
		case run.Last > run.First:
			// Two indexes are two rows, as index sets write them "a,b".
			f(s)
			s = v.status(run.Last)
		}
		f(s)
	}
}

// appendIndex adds the n indexes from ix on to ascending intervals,
// widening the last one when they follow it.
func appendIndex(ivs []indexset.Interval, ix, n int32) []indexset.Interval {
	if k := len(ivs) - 1; k >= 0 && int64(ivs[k].Last)+1 == int64(ix) {
		ivs[k].Last = ix + n - 1
		return ivs
	}
	return append(ivs, indexset.Interval{First: ix, Last: ix + n - 1})
}

// wantedIndexes is spec.indexes, or every index below completions; none
// when spec.indexes cannot be read, as the operator starts none.
func wantedIndexes(job *ibjv1.IndexedBatchJob) indexset.Set {
	set, _ := indexset.OfJob(job)
	return set
}

// jobEnd is the condition that decided the job's end, if any.
func jobEnd(job *ibjv1.IndexedBatchJob) (*metav1.Condition, bool) {
	for _, pair := range [][2]string{
		{ibjv1.ConditionFailureTarget, ibjv1.ConditionFailed},
		{ibjv1.ConditionSuccessCriteriaMet, ibjv1.ConditionComplete},
	} {
		var end *metav1.Condition
		for _, typ := range pair {
			c := meta.FindStatusCondition(job.Status.Conditions, typ)
			if c != nil && c.Status == metav1.ConditionTrue && (end == nil || c.LastTransitionTime.Before(&end.LastTransitionTime)) {
				end = c
			}
		}
		if end != nil {
			return end, pair[0] == ibjv1.ConditionFailureTarget
		}
	}
	return nil, false
}

// status is what is known of one index.
func (v *jobView) status(ix int32) IndexStatus {
	s := IndexStatus{Index: ix}
	f := v.scan.latest[ix]
	if f != nil {
		v.fillPod(&s, f)
	}
	v.fillRecord(&s)
	switch {
	case v.completed.Has(ix) || (f != nil && f.Phase == corev1.PodSucceeded && !jobpod.OldGeneration(v.job, f.Pod)):
		s.State = StateSucceeded
		if f == nil {
			s.Reason = "pods gone; from status.completedIndexes"
		}
	case v.failed.Has(ix):
		s.State = StateFailed
		if f == nil {
			s.Reason = "pods gone; from status.failedIndexes"
		} else {
			s.Reason = v.failureReason(f)
		}
	case f == nil:
		v.noPod(&s)
	case v.end != nil && v.stoppedByEnd(f):
		s.State = StateStopped
		if v.failing {
			s.State = StateFailed
		}
		s.Reason = v.failureReason(f)
	case jobpod.OldGeneration(v.job, f.Pod):
		v.restarted(&s, f)
	case !f.Finished() && f.deleting():
		s.State = StateTerminating
		s.Reason = v.failureReason(f)
	case !f.Finished():
		s.State = StatePending
		if f.Phase == corev1.PodRunning {
			s.State = StateRunning
		}
		s.Reason = f.waiting
	case f.Discarded:
		s.State = StatePending
		s.Reason = "stopped without counting (suspend); runs again when the job does"
	default:
		v.afterFailure(&s, f)
	}
	return s
}

// noPod is an index without pods that is neither completed nor failed.
// One with recorded failures did run: its pods are gone.
func (v *jobView) noPod(s *IndexStatus) {
	switch {
	case v.end != nil && s.LastFailure != nil:
		s.State = StateStopped
		s.Reason = "pods gone; the job ended (" + v.end.Reason + ")"
	case v.end != nil:
		s.State = StateStopped
		s.Reason = "not run: the job ended (" + v.end.Reason + ")"
	case ptr.Deref(v.job.Spec.Suspend, false):
		s.State = StatePending
		s.Reason = "job suspended"
	case s.LastFailure != nil:
		s.State = StatePending
		s.Reason = "pods gone; next attempt not started"
	default:
		s.State = StatePending
		s.Reason = "not started"
	}
}

// restarted is an index whose latest pod a restart of the job ends or
// ended: the index starts again as the job's generation once every pod of
// an earlier one has finished or gone.
func (v *jobView) restarted(s *IndexStatus, f *podFacts) {
	s.State = StatePending
	if !f.Finished() {
		s.State = StateTerminating
	}
	parts := []string{v.failureReason(f)}
	if f.failure.Match == nil && f.Phase == corev1.PodFailed {
		// The restart made this pod's failure count for nothing, and
		// Classify no longer names the rule; it may be the failure that
		// restarted the job.
		if m := jobpod.MatchPolicy(v.job, f.Pod); m != nil && m.Action == ibjv1.PodFailurePolicyActionRestartJob {
			parts = append(parts, ruleMatch(m))
		}
	}
	parts = append(parts, fmt.Sprintf("restart %d: runs again once every earlier pod has stopped", v.job.Status.Restarts))
	s.Reason = strings.Join(slices.DeleteFunc(parts, func(p string) bool { return p == "" }), "; ")
}

// stoppedByEnd: the pod was still running when the job's end was decided,
// and is stopped because of it.
func (v *jobView) stoppedByEnd(f *podFacts) bool {
	if !f.Finished() {
		return true
	}
	return f.deleting() && !f.DeletionRequested().Before(v.end.LastTransitionTime.Time)
}

// afterFailure is an index whose latest pod failed: failed for good, or
// retrying once its backoff has passed.
func (v *jobView) afterFailure(s *IndexStatus, f *podFacts) {
	s.Reason = v.failureReason(f)
	if v.end != nil || f.failure.FailsIndex || f.failure.FailsJob() != nil {
		s.State = StateFailed
		return
	}
	s.State = StateRetrying
	at := v.globalRetryAt
	if v.job.Spec.BackoffLimitPerIndex != nil {
		at = v.backoff.IndexRetryAt(f.Pod, f.failure)
	}
	if !at.IsZero() {
		s.RetryAt = &metav1.Time{Time: at}
	}
}

// fillPod copies the latest pod's facts into the row.
func (v *jobView) fillPod(s *IndexStatus, f *podFacts) {
	s.Attempts = ptr.To(max(f.Attempt+1, v.scan.seen[f.Index]))
	s.Pod = f.Name
	s.Node = f.node
	if !f.started.IsZero() {
		s.StartTime = &metav1.Time{Time: f.started}
	}
	if !f.finished.IsZero() {
		s.FinishTime = &metav1.Time{Time: f.finished}
	}
	if f.exit != nil {
		s.ExitCode = ptr.To(f.exit.code)
		s.Container = f.exit.container
	}
	s.Message = f.message
	if rr := v.job.Spec.RetryResources; rr != nil && rr.OnOOMKilled != nil && f.memory != "" {
		s.Memory = f.memory
		s.OOMKills = ptr.To(f.OOMKills)
	}
	if m := f.failure.Match; m != nil {
		s.Rule = ptr.To(m.Rule)
		s.RuleName = m.Name
		s.Action = string(m.Action)
		s.Message = m.Message
		if failsIndexOrJob(m) {
			s.FailureReason = m.Reason()
		}
	}
	if v.job.Spec.MaxRestarts != nil {
		s.Generation = ptr.To(f.Generation)
	}
	if retriesInPlace(v.job.Spec.PodFailurePolicy) {
		s.InPlaceRestarts = ptr.To(f.InPlace)
	}
	if limit := v.job.Spec.BackoffLimitPerIndex; limit != nil {
		// Each restart in place the operator counts is a failure of the
		// index.
		used := f.Failures + f.failure.InPlace
		if f.failure.Counted {
			used++
		}
		s.RetriesLeft = ptr.To(max(*limit-used, 0))
	}
}

// fillRecord copies the index's last recorded failure into the row.
func (v *jobView) fillRecord(s *IndexStatus) {
	if v.record == nil {
		return
	}
	if attempts := v.record.Attempts(s.Index); len(attempts) > 0 {
		s.RecordedFailures = ptr.To(int32(len(attempts)))
		s.LastFailure = recordedFailure(attempts[len(attempts)-1])
	}
}

// failureReason says why the pod ended: a disruption, the job's end, a
// deletion, the pod's or its container's reason; and the failure-policy
// rule that matched it.
func (v *jobView) failureReason(f *podFacts) string {
	var parts []string
	switch {
	case f.disruption != "":
		parts = append(parts, "disruption ("+f.disruption+")")
	case v.end != nil && v.stoppedByEnd(f):
		parts = append(parts, v.end.Reason)
	case f.deleting():
		parts = append(parts, "deletion")
	case f.podReason != "":
		parts = append(parts, f.podReason)
	case f.exit != nil && f.exit.code != 0:
		parts = append(parts, exitReason(f.exit))
	}
	if m := f.failure.Match; m != nil {
		parts = append(parts, ruleMatch(m))
	}
	return strings.Join(parts, "; ")
}

// ruleMatch says which rule matched: `rule 1: Ignore` for an unnamed rule;
// for a named one its name, and the reason a FailIndex or FailJob match
// gives, as in `rule 0 "bad_input": FailIndex (PodFailurePolicy_bad_input)`.
func ruleMatch(m *jobpod.Match) string {
	switch {
	case m.Name == "":
		return fmt.Sprintf("rule %d: %s", m.Rule, m.Action)
	case failsIndexOrJob(m):
		return fmt.Sprintf("rule %d %q: %s (%s)", m.Rule, m.Name, m.Action, m.Reason())
	}
	return fmt.Sprintf("rule %d %q: %s", m.Rule, m.Name, m.Action)
}

// failsIndexOrJob: the match's action is FailIndex or FailJob, the actions
// that give a reason.
func failsIndexOrJob(m *jobpod.Match) bool {
	return m.Action == batchv1.PodFailurePolicyActionFailIndex || m.Action == batchv1.PodFailurePolicyActionFailJob
}

// retriesInPlace: a rule of the policy retries in place.
func retriesInPlace(policy *ibjv1.PodFailurePolicy) bool {
	return policy != nil && slices.ContainsFunc(policy.Rules, func(r ibjv1.PodFailurePolicyRule) bool {
		return r.Retry == ibjv1.RetryInPlace
	})
}

// exitReason is the container's termination reason (Error, OOMKilled), or
// its exit code when the kubelet gave none.
func exitReason(e *containerEnd) string {
	if e.reason != "" {
		return e.reason
	}
	return fmt.Sprintf("exit code %d", e.code)
}
