package controller

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
)

// cluster plays the API server, the kubelet and the reconciler's apply step
// around the pure core: every sync hands syncJob a copy of the job and its
// pods, then applies the plan in the reconciler's order (deletes, creates,
// status write, finalizer removals, discards). It keeps a ledger of what
// the controller must count and checks the invariants of SPEC.md after
// every step.
type cluster struct {
	t       testing.TB
	job     *ibjv1.IndexedBatchJob
	pods    []*corev1.Pod // in creation order
	seen    []*corev1.Pod // the pods as the last sync saw them
	now     time.Time
	backoff Backoff
	uids    int

	jobDeleted bool
	// crashAt stops the next apply after that step (1 deletes, 2 creates,
	// 3 status write, 4 finalizer removals), as a controller restart would;
	// the following sync starts from the last written status.
	crashAt int
	// lagging makes the next sync see unsatisfied expectations.
	lagging bool
	// ignores is the oracle of the failure policy's Ignore rules.
	ignores func(*corev1.Pod) bool

	// The ledger. recordedSucc/recordedFail: every UID ever written to
	// uncountedTerminatedPods. mustCount: pods the sim saw end (succeeded,
	// failed, or deleted under TerminatingOrFailed) while holding the
	// finalizer, mapped to whether only "failed" is a correct record.
	recordedSucc, recordedFail sets.Set[types.UID]
	mustCount                  map[types.UID]bool
	indexOfUID                 map[types.UID]int32
	// stripped are the indexes of which the controller discarded a pod
	// (suspend). Such a pod may carry the index's failure count away: as
	// upstream, the earlier failed pod was let go once it was replaced.
	stripped sets.Set[int32]
}

func newCluster(t testing.TB, job *ibjv1.IndexedBatchJob) *cluster {
	if job.UID == "" {
		job.UID = "job-uid"
	}
	if job.Generation == 0 {
		job.Generation = 1
	}
	c := &cluster{
		t: t, job: job, now: testNow, backoff: DefaultBackoff,
		recordedSucc: sets.New[types.UID](), recordedFail: sets.New[types.UID](),
		mustCount: map[types.UID]bool{}, indexOfUID: map[types.UID]int32{},
		stripped: sets.New[int32](),
	}
	c.ignores = func(pod *corev1.Pod) bool {
		return matchFailurePolicy(c.job.Spec.PodFailurePolicy, newCachedPod(pod)).action == batchv1.PodFailurePolicyActionIgnore
	}
	return c
}

func (c *cluster) errorf(format string, args ...any) {
	c.t.Helper()
	c.t.Errorf("%s\n%s", fmt.Sprintf(format, args...), c.dump())
}

func (c *cluster) dump() string {
	var b strings.Builder
	st := c.job.Status
	fmt.Fprintf(&b, "  at %s: status succeeded=%d failed=%d completed=%q failedIndexes=%q uncounted=%v active=%d terminating=%v conditions=",
		c.now.Sub(testNow), st.Succeeded, st.Failed, st.CompletedIndexes, ptr.Deref(st.FailedIndexes, "<nil>"), st.UncountedTerminatedPods, st.Active, ptr.Deref(st.Terminating, -1))
	for _, cond := range st.Conditions {
		fmt.Fprintf(&b, "%s=%s(%s) ", cond.Type, cond.Status, cond.Reason)
	}
	b.WriteString("\n")
	for _, p := range c.pods {
		fmt.Fprintf(&b, "  pod %s uid=%s phase=%s deleted=%v finalizer=%v discarded=%v failures=%s\n", p.Name, p.UID, p.Status.Phase,
			p.DeletionTimestamp != nil, hasTrackingFinalizer(newCachedPod(p)), isDiscarded(newCachedPod(p)), p.Annotations[ibjv1.IndexFailureCountAnnotation])
	}
	return b.String()
}

// add puts a pod in the cluster as is (a test's starting state).
func (c *cluster) add(pods ...*corev1.Pod) {
	for _, p := range pods {
		c.pods = append(c.pods, p)
		ix, _ := parseIndex(p)
		c.indexOfUID[p.UID] = ix
	}
}

func (c *cluster) pod(uid types.UID) *corev1.Pod {
	for _, p := range c.pods {
		if p.UID == uid {
			return p
		}
	}
	return nil
}

// podsOfIndex are the index's pods in creation order.
func (c *cluster) podsOfIndex(ix int32) []*corev1.Pod {
	var out []*corev1.Pod
	for _, p := range c.pods {
		if i, ok := parseIndex(p); ok && i == ix {
			out = append(out, p)
		}
	}
	return out
}

// pick returns one pod of the index that satisfies f, chosen by n among them.
func (c *cluster) pick(ix int32, n int, f func(*corev1.Pod) bool) *corev1.Pod {
	var cands []*corev1.Pod
	for _, p := range c.podsOfIndex(ix) {
		if f(p) {
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		return nil
	}
	return cands[len(cands)-1-n%len(cands)]
}

// observe notes a pod's end the controller must count: it still holds the
// finalizer and was not discarded.
func (c *cluster) observe(p *corev1.Pod) {
	if !hasTrackingFinalizer(newCachedPod(p)) || isDiscarded(newCachedPod(p)) {
		return
	}
	switch {
	case p.Status.Phase == corev1.PodSucceeded:
		if _, seen := c.mustCount[p.UID]; !seen {
			c.mustCount[p.UID] = false
		}
	case p.Status.Phase == corev1.PodFailed:
		if !c.ignores(p) {
			c.mustCount[p.UID] = true
		}
	case p.DeletionTimestamp != nil && !onlyReplaceFailed(c.job):
		c.mustCount[p.UID] = false
	}
}

// The kubelet and the users.

func (c *cluster) succeed(p *corev1.Pod) {
	if p == nil || isFinished(newCachedPod(p)) {
		return
	}
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = []corev1.ContainerStatus{terminated("main", 0, c.now)}
	c.observe(p)
}

func (c *cluster) fail(p *corev1.Pod, code int32, disruption bool) {
	if p == nil || isFinished(newCachedPod(p)) {
		return
	}
	p.Status.Phase = corev1.PodFailed
	p.Status.ContainerStatuses = []corev1.ContainerStatus{terminated("main", code, c.now)}
	if disruption {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(c.now),
		})
	}
	c.observe(p)
}

// remove is a delete call: the pod gets its deletion timestamp.
func (c *cluster) remove(p *corev1.Pod) {
	if p == nil || p.DeletionTimestamp != nil {
		return
	}
	p.DeletionTimestamp = &metav1.Time{Time: c.now}
	c.observe(p)
}

// kubelet lets every deleted pod without finalizers go.
func (c *cluster) kubelet() {
	c.pods = slices.DeleteFunc(c.pods, func(p *corev1.Pod) bool {
		return p.DeletionTimestamp != nil && len(p.Finalizers) == 0
	})
}

func (c *cluster) advance(d time.Duration) { c.now = c.now.Add(d) }

func (c *cluster) setSuspend(suspend bool) {
	c.job.Spec.Suspend = ptr.To(suspend)
	c.job.Generation++
}

// sync runs the core once and applies its plan.
func (c *cluster) sync() plan {
	c.t.Helper()
	if c.jobDeleted {
		return plan{}
	}
	in := syncInput{
		job:                   c.job.DeepCopy(),
		now:                   c.now,
		backoff:               c.backoff,
		expectationsSatisfied: !c.lagging,
	}
	c.seen = c.seen[:0]
	for _, p := range c.pods {
		seen := p.DeepCopy()
		c.seen = append(c.seen, seen)
		in.pods = append(in.pods, newCachedPod(seen))
	}
	c.lagging = false
	crashAt := c.crashAt
	c.crashAt = 0

	p := syncJob(in)
	c.checkPlan(in, p)
	c.apply(in, p, crashAt)
	c.checkState(p)
	return p
}

// apply is the reconciler's apply, against the simulated API server.
func (c *cluster) apply(in syncInput, p plan, crashAt int) {
	c.t.Helper()
	if p.deleteJob {
		c.jobDeleted = true
		return
	}
	for _, d := range p.delete {
		pod := c.pod(d.pod.UID)
		if pod == nil {
			c.errorf("deleting pod %s that is gone", d.pod.Name)
			continue
		}
		if d.stripFinalizer && hasTrackingFinalizer(newCachedPod(pod)) {
			pod.Finalizers = nil
			pod.Annotations[discardedAnnotation] = "true"
			c.stripped.Insert(c.indexOfUID[pod.UID])
		}
		c.remove(pod)
	}
	if crashAt == 1 {
		return
	}
	for _, pc := range p.create {
		pod := newPod(c.job, pc)
		for _, other := range c.pods {
			if other.Name == pod.Name {
				c.errorf("created pod %s, which exists (attempt numbers repeat)", pod.Name)
			}
		}
		c.uids++
		pod.UID = types.UID(fmt.Sprintf("u%03d", c.uids))
		pod.CreationTimestamp = metav1.NewTime(c.now)
		pod.Status.Phase = corev1.PodPending
		c.add(pod)
	}
	if crashAt == 2 {
		return
	}
	if !equality.Semantic.DeepEqual(c.job.Status, p.status) {
		c.writeStatus(in, p.status)
	}
	if crashAt == 3 {
		return
	}
	for _, pod := range p.removeFinalizer {
		if !IsFinished(in.job) && !c.recordedSucc.Has(pod.UID) && !c.recordedFail.Has(pod.UID) &&
			!(pod.phase == corev1.PodFailed && c.ignores(c.pod(pod.UID))) {
			c.errorf("removed the finalizer of pod %s (phase %s) before its result was in the status", pod.Name, pod.phase)
		}
		if live := c.pod(pod.UID); live != nil {
			live.Finalizers = nil
		}
	}
	if crashAt == 4 {
		return
	}
	for _, pod := range p.discard {
		if live := c.pod(pod.UID); live != nil {
			live.Finalizers = nil
			live.Annotations[discardedAnnotation] = "true"
		}
	}
}

// writeStatus is the status update; it checks what a status may say.
func (c *cluster) writeStatus(in syncInput, st ibjv1.IndexedBatchJobStatus) {
	c.t.Helper()
	before := c.job.Status
	c.job.Status = *st.DeepCopy()
	failing := isTrue(&st, ibjv1.ConditionFailureTarget)

	var uSucc, uFail []types.UID
	if u := st.UncountedTerminatedPods; u != nil {
		uSucc, uFail = u.Succeeded, u.Failed
	}
	inputPod := func(uid types.UID) *corev1.Pod {
		for _, p := range c.seen {
			if p.UID == uid {
				return p
			}
		}
		return nil
	}
	for _, uid := range uSucc {
		if c.recordedSucc.Has(uid) {
			continue
		}
		if c.recordedFail.Has(uid) {
			c.errorf("pod %s recorded as succeeded after it was recorded as failed", uid)
		}
		p := inputPod(uid)
		if p == nil || p.Status.Phase != corev1.PodSucceeded || !hasTrackingFinalizer(newCachedPod(p)) || isDiscarded(newCachedPod(p)) {
			c.errorf("pod %s recorded as succeeded, but the sync saw %+v", uid, p)
		}
		c.recordedSucc.Insert(uid)
	}
	for _, uid := range uFail {
		if c.recordedFail.Has(uid) {
			continue
		}
		if c.recordedSucc.Has(uid) {
			c.errorf("pod %s recorded as failed after it was recorded as succeeded", uid)
		}
		p := inputPod(uid)
		switch {
		case p == nil || !hasTrackingFinalizer(newCachedPod(p)) || isDiscarded(newCachedPod(p)):
			c.errorf("pod %s recorded as failed, but the sync saw %+v", uid, p)
		case p.Status.Phase == corev1.PodFailed:
			if c.ignores(p) {
				c.errorf("pod %s recorded as failed though an Ignore rule matches it", p.Name)
			}
		case p.Status.Phase == corev1.PodSucceeded:
			c.errorf("succeeded pod %s recorded as failed", p.Name)
		case failing:
			// Once the job fails, its unfinished pods count as failed.
		case p.DeletionTimestamp != nil && !onlyReplaceFailed(c.job):
			// Replaced as soon as terminating: counted failed at once.
		default:
			c.errorf("unfinished pod %s recorded as failed", p.Name)
		}
		c.recordedFail.Insert(uid)
	}
	// Counts are exact: whatever was ever recorded is counted or still
	// recorded, never both, never neither.
	if got, want := int(st.Succeeded)+len(uSucc), c.recordedSucc.Len(); got != want {
		c.errorf("succeeded %d + uncounted %d = %d, but %d pods were recorded as succeeded", st.Succeeded, len(uSucc), got, want)
	}
	if got, want := int(st.Failed)+len(uFail), c.recordedFail.Len(); got != want {
		c.errorf("failed %d + uncounted %d = %d, but %d pods were recorded as failed", st.Failed, len(uFail), got, want)
	}
	if st.Succeeded < before.Succeeded || st.Failed < before.Failed {
		c.errorf("a counter went down: succeeded %d -> %d, failed %d -> %d", before.Succeeded, st.Succeeded, before.Failed, st.Failed)
	}

	completed, err1 := indexset.Parse(st.CompletedIndexes, c.job.Spec.Completions)
	failed, err2 := indexset.Parse(ptr.Deref(st.FailedIndexes, ""), c.job.Spec.Completions)
	if err1 != nil || err2 != nil {
		c.errorf("unreadable index sets: %v, %v", err1, err2)
	}
	if completed.CountIn(failed) != 0 {
		c.errorf("completedIndexes %q and failedIndexes %q overlap", st.CompletedIndexes, *st.FailedIndexes)
	}
	if st.FailedIndexes != nil && c.job.Spec.BackoffLimitPerIndex == nil {
		c.errorf("failedIndexes set without backoffLimitPerIndex")
	}
	for _, typ := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
		if !isTrue(&st, typ) {
			continue
		}
		if len(uSucc)+len(uFail) > 0 {
			c.errorf("%s while pods are uncounted", typ)
		}
		if !isTrue(&before, typ) {
			for _, p := range c.pods {
				if !isFinished(newCachedPod(p)) {
					c.errorf("%s while pod %s has not finished (terminating=%v)", typ, p.Name, p.DeletionTimestamp != nil)
				}
			}
		}
		// A job that is not suspended has started. (Suspend clears
		// startTime, so a job that ends while suspended, when a pod that
		// was already terminating fails, has none.)
		if st.StartTime == nil && !isTrue(&before, typ) && !ptr.Deref(c.job.Spec.Suspend, false) {
			c.errorf("%s without startTime", typ)
		}
		if st.Active != 0 {
			c.errorf("%s with active %d", typ, st.Active)
		}
	}
	if isTrue(&st, ibjv1.ConditionComplete) && (st.CompletionTime == nil || !isTrue(&st, ibjv1.ConditionSuccessCriteriaMet)) {
		c.errorf("Complete without completionTime or SuccessCriteriaMet")
	}
	if isTrue(&st, ibjv1.ConditionFailed) && !failing {
		c.errorf("Failed without FailureTarget")
	}
	if isTrue(&st, ibjv1.ConditionFailureTarget) && isTrue(&st, ibjv1.ConditionSuccessCriteriaMet) {
		c.errorf("both FailureTarget and SuccessCriteriaMet")
	}
}

// checkPlan checks the decisions before they are applied.
func (c *cluster) checkPlan(in syncInput, p plan) {
	c.t.Helper()
	n := in.job.Spec.Completions
	inCompleted, _ := indexset.Parse(in.job.Status.CompletedIndexes, n)
	inFailed, _ := indexset.Parse(ptr.Deref(in.job.Status.FailedIndexes, ""), n)
	outCompleted, _ := indexset.Parse(p.status.CompletedIndexes, n)
	outFailed, _ := indexset.Parse(ptr.Deref(p.status.FailedIndexes, ""), n)
	// Failures recorded per index once this plan's status is written.
	failures := map[int32]int32{}
	allFailed := c.recordedFail.Clone()
	if u := p.status.UncountedTerminatedPods; u != nil {
		allFailed.Insert(u.Failed...)
	}
	for uid := range allFailed {
		failures[c.indexOfUID[uid]]++
	}
	seen := sets.New[int32]()
	for _, pc := range p.create {
		if pc.index < 0 || pc.index >= n {
			c.errorf("create for index %d of %d", pc.index, n)
		}
		if inCompleted.Has(pc.index) || inFailed.Has(pc.index) || outCompleted.Has(pc.index) || outFailed.Has(pc.index) {
			c.errorf("create for finished index %d", pc.index)
		}
		if seen.Has(pc.index) {
			c.errorf("two creates for index %d in one sync", pc.index)
		}
		seen.Insert(pc.index)
		if IsFinished(in.job) || ptr.Deref(in.job.Spec.Suspend, false) || !in.expectationsSatisfied {
			c.errorf("create for index %d while finished, suspended or with expectations pending", pc.index)
		}
		if c.job.Spec.BackoffLimitPerIndex != nil && pc.failures < failures[pc.index] && !c.stripped.Has(pc.index) {
			c.errorf("index %d retried with failure count %d, but %d of its failures were counted", pc.index, pc.failures, failures[pc.index])
		}
	}
}

// checkState checks the pods after a sync was applied.
func (c *cluster) checkState(p plan) {
	c.t.Helper()
	if c.jobDeleted {
		return
	}
	onlyFailed := onlyReplaceFailed(c.job)
	parallelism := int(ptr.Deref(c.job.Spec.Parallelism, 1))
	active, unfinished := 0, 0
	perIndex := map[int32]int{}
	for _, p := range c.pods {
		if isFinished(newCachedPod(p)) {
			continue
		}
		unfinished++
		if isActive(newCachedPod(p)) {
			active++
		}
		ix, _ := parseIndex(p)
		perIndex[ix]++
		if onlyFailed && perIndex[ix] > 1 {
			c.errorf("with podReplacementPolicy Failed, index %d has %d unfinished pods", ix, perIndex[ix])
		}
	}
	if active > parallelism {
		c.errorf("%d active pods, parallelism %d", active, parallelism)
	}
	// With podReplacementPolicy Failed a terminating pod holds its slot.
	if onlyFailed && len(p.create) > 0 && unfinished > parallelism {
		c.errorf("created pods up to %d unfinished pods, parallelism %d", unfinished, parallelism)
	}
}

// settle lets the job run to its end with no new trouble: it resumes the
// job, and each round the kubelet ends every pod (running ones succeed,
// terminating ones fail and go), the clock moves on a minute and the
// controller syncs. The job must finish, and then the ledger must match:
// every end the controller had to see is counted, exactly once.
func (c *cluster) settle() {
	c.t.Helper()
	c.crashAt, c.lagging = 0, false
	if ptr.Deref(c.job.Spec.Suspend, false) {
		c.setSuspend(false)
	}
	for i := 0; i < 200 && !c.jobDeleted && !IsFinished(c.job); i++ {
		for _, p := range c.pods {
			switch {
			case isActive(newCachedPod(p)):
				c.succeed(p)
			case isTerminating(newCachedPod(p)):
				c.fail(p, 137, false)
			}
		}
		c.kubelet()
		c.advance(time.Minute)
		c.sync()
	}
	if c.jobDeleted {
		return
	}
	if !IsFinished(c.job) {
		c.errorf("the job never finished")
		return
	}
	c.sync() // the finished job lets go of its pods
	st := c.job.Status
	if st.UncountedTerminatedPods != nil {
		c.errorf("finished with uncounted pods %v", st.UncountedTerminatedPods)
	}
	for uid, onlyFailed := range c.mustCount {
		switch {
		case onlyFailed && !c.recordedFail.Has(uid):
			c.errorf("pod %s failed holding the finalizer, but its failure was never counted", uid)
		case !c.recordedFail.Has(uid) && !c.recordedSucc.Has(uid):
			c.errorf("pod %s ended holding the finalizer, but its end was never counted", uid)
		}
	}
	if int(st.Succeeded) != c.recordedSucc.Len() || int(st.Failed) != c.recordedFail.Len() {
		c.errorf("finished with succeeded=%d failed=%d, ledger %d/%d", st.Succeeded, st.Failed, c.recordedSucc.Len(), c.recordedFail.Len())
	}
	for _, p := range c.pods {
		if hasTrackingFinalizer(newCachedPod(p)) {
			c.errorf("finished job still holds pod %s", p.Name)
		}
	}
}

// fuzzJob decodes a small job from four bytes.
func fuzzJob(b []byte) (*ibjv1.IndexedBatchJob, func(*corev1.Pod) bool) {
	for len(b) < 4 {
		b = append(b, 0)
	}
	w := utils.MakeIndexedBatchJob("fz", "ns").UID("job-uid").
		Completions(3 + int32(b[0]%3)).Parallelism(1 + int32(b[0]/3%3))
	flags, perIndex := b[1], b[1]&1 != 0
	if perIndex {
		w.BackoffLimitPerIndex(int32(flags >> 1 % 3))
		if flags&8 != 0 {
			w.MaxFailedIndexes(1)
		}
	} else {
		w.BackoffLimit(int32(b[2] % 8))
	}
	withPolicy, ignoreDisruption := flags&16 != 0, flags&64 != 0
	if withPolicy {
		rules := []batchv1.PodFailurePolicyRule{
			utils.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
		}
		if ignoreDisruption {
			rules = append(rules, utils.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue))
		}
		if perIndex {
			rules = append(rules, utils.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 43))
		}
		if flags&32 != 0 {
			rules = append(rules, utils.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 44))
		}
		w.PodFailurePolicy(rules...)
		if flags&128 != 0 {
			w.PodReplacementPolicy(batchv1.Failed)
		}
	} else if flags&128 != 0 {
		w.PodReplacementPolicy(batchv1.Failed)
	} else if flags&32 != 0 {
		w.PodReplacementPolicy(batchv1.TerminatingOrFailed)
	}
	if b[3]&1 != 0 {
		w.SuccessPolicy(utils.SucceededCount(2 + int32(b[0]%3)))
	}
	if b[3]&2 != 0 {
		w.ActiveDeadlineSeconds(600)
	}
	if b[3]&4 != 0 {
		w.Suspend(true)
	}
	// An oracle for the Ignore rules that does not use the code under test.
	ignores := func(p *corev1.Pod) bool {
		if !withPolicy || p.Status.Phase != corev1.PodFailed {
			return false
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Terminated != nil && cs.State.Terminated.ExitCode == 42 {
				return true
			}
		}
		if ignoreDisruption {
			for _, cond := range p.Status.Conditions {
				if cond.Type == corev1.DisruptionTarget && cond.Status == corev1.ConditionTrue {
					return true
				}
			}
		}
		return false
	}
	return w.Obj(), ignores
}

// FuzzSyncInvariants drives a small job through a sequence of pod events,
// restarts and clock steps decoded from the input, running the core after
// each, and checks the invariants of SPEC.md at every step and once the
// controller settled.
//
// Input: 4 bytes of job configuration (see fuzzJob), then pairs (op, arg).
// op%11 picks the event; op ≥ 128 skips the sync after it, so several
// events can pile up between syncs.
func FuzzSyncInvariants(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 1, 0, 2})
	f.Add([]byte{4, 3, 0, 0, 1, 0, 6, 2, 1, 0, 6, 10, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			return
		}
		job, ignores := fuzzJob(data)
		if len(data) >= 4 {
			data = data[4:]
		} else {
			data = nil
		}
		c := newCluster(t, job)
		c.ignores = ignores
		codes := []int32{1, 42, 43, 44, 2, 137}
		c.sync()
		for i := 0; i+1 < len(data) && !t.Failed(); i += 2 {
			op, arg := data[i], data[i+1]
			ix := int32(arg) % job.Spec.Completions
			n := int(arg >> 3)
			unfinished := func(p *corev1.Pod) bool { return !isFinished(newCachedPod(p)) }
			switch op & 0x7f % 11 {
			case 0:
				c.succeed(c.pick(ix, n, unfinished))
			case 1:
				c.fail(c.pick(ix, n, unfinished), codes[int(arg>>4)%len(codes)], false)
			case 2:
				c.remove(c.pick(ix, n, func(p *corev1.Pod) bool { return isActive(newCachedPod(p)) }))
			case 3:
				c.fail(c.pick(ix, n, func(p *corev1.Pod) bool { return isTerminating(newCachedPod(p)) }), 137, false)
			case 4:
				c.kubelet()
			case 5:
				c.crashAt = int(arg%4) + 1
			case 6:
				c.advance(time.Duration(arg%64+1) * 5 * time.Second)
			case 7:
				c.setSuspend(!ptr.Deref(c.job.Spec.Suspend, false))
			case 8:
				c.lagging = true
			case 9:
				c.fail(c.pick(ix, n, unfinished), 137, true)
			case 10:
			}
			if op&0x80 == 0 {
				c.sync()
			}
		}
		if !t.Failed() {
			c.settle()
		}
	})
}
