package kubectlibj

import (
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// Backoff is the delay before a failed pod is replaced: Base after the first
// failure, twice the previous delay after each further one, at most Max.
type Backoff struct {
	Base, Max time.Duration
}

// DefaultBackoff is the operator's (and the built-in Job controller's)
// default: 10 s, 20 s, 40 s … 10 min. The operator's --pod-failure-backoff
// flags may change it cluster-wide; the plugin's flags of the same names say
// so.
var DefaultBackoff = Backoff{Base: 10 * time.Second, Max: 10 * time.Minute}

// delay is the wait after n failures.
func (b Backoff) delay(n int32) time.Duration {
	if n <= 0 || b.Base <= 0 {
		return 0
	}
	d := b.Base
	for range n - 1 {
		if d >= b.Max {
			break
		}
		d *= 2
	}
	return min(d, b.Max)
}

// forJob applies the job's spec.retryBackoff over b.
func (b Backoff) forJob(job *ibjv1.IndexedBatchJob) Backoff {
	if rb := job.Spec.RetryBackoff; rb != nil {
		if rb.InitialDelaySeconds != nil {
			b.Base = time.Duration(*rb.InitialDelaySeconds) * time.Second
		}
		if rb.MaxDelaySeconds != nil {
			b.Max = time.Duration(*rb.MaxDelaySeconds) * time.Second
		}
	}
	return b
}

// podScan gathers, a page of pods at a time, what the per-index view needs:
// the latest pod of each index, how many pods each index has left, and
// the ends the job-wide backoff counts.
type podScan struct {
	job    *ibjv1.IndexedBatchJob
	latest map[int32]*podFacts
	seen   map[int32]int32
	// lastSuccess and failureEnds feed the job-wide backoff of a job
	// without backoffLimitPerIndex: failures since the last success.
	lastSuccess time.Time
	failureEnds []time.Time
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
	s.seen[f.index]++
	if old := s.latest[f.index]; old == nil || f.newer(old) {
		s.latest[f.index] = f
	}
	switch {
	case f.phase == corev1.PodSucceeded:
		if f.finished.After(s.lastSuccess) {
			s.lastSuccess = f.finished
		}
	case failureOf(s.job, f).failed:
		s.failureEnds = append(s.failureEnds, f.finished)
	}
}

// verdict is how a pod's end counts, as the operator decides it (upstream's
// isPodFailed, matchPodFailurePolicy and isIndexFailed).
type verdict struct {
	failed     bool // the pod ended in failure
	ignored    bool // an Ignore rule matched: counts against no limit
	counted    bool // counts against backoffLimit and backoffLimitPerIndex
	failsIndex bool // with backoffLimitPerIndex: the index fails for good
	failsJob   bool // a FailJob rule matched
}

// failureOf judges a pod of the job. A pod is failed in phase Failed, or,
// when terminating pods are replaced at once (podReplacementPolicy
// TerminatingOrFailed, the default without a podFailurePolicy), once it is
// being deleted before it succeeded; never when the operator discarded it.
func failureOf(job *ibjv1.IndexedBatchJob, f *podFacts) verdict {
	replaceTerminating := ptr.Deref(job.Spec.PodReplacementPolicy, batchv1.TerminatingOrFailed) == batchv1.TerminatingOrFailed &&
		(job.Spec.PodReplacementPolicy != nil || job.Spec.PodFailurePolicy == nil)
	failed := !f.discarded && (f.phase == corev1.PodFailed ||
		(replaceTerminating && f.deleting && f.phase != corev1.PodSucceeded))
	if !failed {
		return verdict{}
	}
	if f.rule != nil && f.rule.action == batchv1.PodFailurePolicyActionIgnore {
		return verdict{failed: true, ignored: true}
	}
	v := verdict{failed: true, counted: true}
	v.failsJob = f.rule != nil && f.rule.action == batchv1.PodFailurePolicyActionFailJob
	if limit := job.Spec.BackoffLimitPerIndex; limit != nil {
		v.failsIndex = f.failures+1 > *limit || (f.rule != nil && f.rule.action == batchv1.PodFailurePolicyActionFailIndex)
	}
	return v
}

// jobView is one job with its scanned pods at one moment: everything the
// state of an index is decided from.
type jobView struct {
	job     *ibjv1.IndexedBatchJob
	now     time.Time
	backoff Backoff
	scan    *podScan
	// wanted are the indexes the job runs; completed and failed are its
	// status's index sets.
	wanted, completed, failed indexset.Set
	// end is the condition that ended the job (FailureTarget or Failed,
	// SuccessCriteriaMet or Complete), the earliest of its pair; failing
	// tells which.
	end     *metav1.Condition
	failing bool
	// globalRetryAt: without backoffLimitPerIndex, when the job-wide backoff
	// lets a replacement start; zero when nothing waits.
	globalRetryAt time.Time
}

func newJobView(job *ibjv1.IndexedBatchJob, scan *podScan, now time.Time, backoff Backoff) *jobView {
	v := &jobView{job: job, now: now, backoff: backoff.forJob(job), scan: scan}
	v.wanted = wantedIndexes(job)
	v.completed, _ = indexset.Parse(job.Status.CompletedIndexes, 0)
	v.failed, _ = indexset.Parse(ptr.Deref(job.Status.FailedIndexes, ""), 0)
	v.end, v.failing = jobEnd(job)
	var failures int32
	var last time.Time
	for _, t := range scan.failureEnds {
		if t.After(scan.lastSuccess) {
			failures++
			last = latest(last, t)
		}
	}
	if failures > 0 && !last.IsZero() {
		v.globalRetryAt = last.Add(v.backoff.delay(failures))
	}
	return v
}

// wantedIndexes is spec.indexes, or every index below completions.
func wantedIndexes(job *ibjv1.IndexedBatchJob) indexset.Set {
	all := indexset.Range(0, job.Spec.Completions-1)
	if job.Spec.Indexes == nil {
		return all
	}
	set, err := indexset.Parse(*job.Spec.Indexes, job.Spec.Completions)
	if err != nil {
		return all
	}
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

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// status is what is known of one index.
func (v *jobView) status(ix int32) IndexStatus {
	s := IndexStatus{Index: ix}
	f := v.scan.latest[ix]
	if f != nil {
		v.fillPod(&s, f)
	}
	switch {
	case v.completed.Has(ix) || (f != nil && f.phase == corev1.PodSucceeded):
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
	case !f.isFinished() && f.deleting:
		s.State = StateTerminating
		s.Reason = v.failureReason(f)
	case !f.isFinished():
		s.State = StatePending
		if f.phase == corev1.PodRunning {
			s.State = StateRunning
		}
		s.Reason = f.waiting
	case f.discarded:
		s.State = StatePending
		s.Reason = "stopped without counting (suspend); runs again when the job does"
	default:
		v.afterFailure(&s, f)
	}
	return s
}

// noPod is an index without pods that is neither completed nor failed.
func (v *jobView) noPod(s *IndexStatus) {
	switch {
	case v.end != nil:
		s.State = StateStopped
		s.Reason = "not run: the job ended (" + v.end.Reason + ")"
	case ptr.Deref(v.job.Spec.Suspend, false):
		s.State = StatePending
		s.Reason = "job suspended"
	default:
		s.State = StatePending
		s.Reason = "not started"
	}
}

// stoppedByEnd: the pod was still running when the job's end was decided,
// and is stopped because of it.
func (v *jobView) stoppedByEnd(f *podFacts) bool {
	if !f.isFinished() {
		return true
	}
	return f.deleting && !f.deletedAt.Before(v.end.LastTransitionTime.Time)
}

// afterFailure is an index whose latest pod failed: failed for good, or
// retrying once its backoff has passed.
func (v *jobView) afterFailure(s *IndexStatus, f *podFacts) {
	s.Reason = v.failureReason(f)
	vd := failureOf(v.job, f)
	if v.end != nil || vd.failsIndex || vd.failsJob {
		s.State = StateFailed
		return
	}
	s.State = StateRetrying
	at := v.globalRetryAt
	if v.job.Spec.BackoffLimitPerIndex != nil {
		at = time.Time{}
		if !f.finished.IsZero() {
			at = f.finished.Add(v.backoff.delay(f.failures + f.ignored + 1))
		}
	}
	if !at.IsZero() {
		s.RetryAt = &metav1.Time{Time: at}
	}
}

// fillPod copies the latest pod's facts into the row.
func (v *jobView) fillPod(s *IndexStatus, f *podFacts) {
	s.Attempts = ptr.To(max(f.attempt+1, v.scan.seen[f.index]))
	s.Pod = f.name
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
	if f.rule != nil {
		s.Rule = ptr.To(f.rule.index)
		s.Action = string(f.rule.action)
		s.Message = f.rule.message
	}
	if limit := v.job.Spec.BackoffLimitPerIndex; limit != nil {
		used := f.failures
		if failureOf(v.job, f).counted {
			used++
		}
		s.RetriesLeft = ptr.To(max(*limit-used, 0))
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
	case f.deleting:
		parts = append(parts, "deletion")
	case f.podReason != "":
		parts = append(parts, f.podReason)
	case f.exit != nil && f.exit.code != 0:
		parts = append(parts, exitReason(f.exit))
	}
	if f.rule != nil {
		parts = append(parts, fmt.Sprintf("rule %d: %s", f.rule.index, f.rule.action))
	}
	return strings.Join(parts, "; ")
}

// exitReason is the container's termination reason (Error, OOMKilled), or
// its exit code when the kubelet gave none.
func exitReason(e *containerEnd) string {
	if e.reason != "" {
		return e.reason
	}
	return fmt.Sprintf("exit code %d", e.code)
}
