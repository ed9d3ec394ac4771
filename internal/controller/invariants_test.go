package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// checkActive checks that the status counts the active pods on the API
// server, once every delete of the sync and its status write went through
// (a failed create is taken off the count).
func (c *cluster) checkActive() {
	c.t.Helper()
	active := 0
	for _, p := range c.pods {
		if jobpod.Read(p).Active() {
			active++
		}
	}
	if int(c.job.Status.Active) != active {
		c.errorf("status says %d active pods, the API server holds %d", c.job.Status.Active, active)
	}
}

// checkStatus checks a status the controller wrote, and notes in the
// ledger the results it records.
func (c *cluster) checkStatus(in syncInput, st ibjv1.IndexedBatchJobStatus) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	job := in.job
	before := job.Status
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
	beforeCompleted, _ := indexset.Parse(before.CompletedIndexes, job.Spec.Completions)
	beforeFailed, _ := indexset.Parse(ptr.Deref(before.FailedIndexes, ""), job.Spec.Completions)
	// countInPlace notes the failures in place of a pod recorded by its
	// UID for the first time: none for a pod of an index that had finished.
	countInPlace := func(p *corev1.Pod) {
		if p == nil || c.recordedInPlace.Has(p.UID) {
			return
		}
		c.recordedInPlace.Insert(p.UID)
		if ix, ok := jobpod.Index(p); ok && !beforeCompleted.Has(ix) && !beforeFailed.Has(ix) {
			c.inPlace += int(jobpod.Classify(job, jobpod.Read(p)).InPlaceRecorded())
		}
	}
	for _, uid := range uSucc {
		p := inputPod(uid)
		if !c.recordedInPlace.Has(uid) && (p == nil || jobpod.InPlaceFailures(job, jobpod.Read(p)) == 0) {
			c.errorf("uncountedTerminatedPods lists succeeded pod %s without failures in place: it is counted by its index", uid)
		}
		countInPlace(p)
	}
	for _, uid := range uFail {
		if c.recordedFail.Has(uid) {
			continue
		}
		if c.recordedSucc.Has(uid) {
			c.errorf("pod %s recorded as failed after it was recorded as succeeded", uid)
		}
		p := inputPod(uid)
		countInPlace(p)
		switch {
		case p == nil || !jobpod.Read(p).Tracked || jobpod.Read(p).Discarded:
			c.errorf("pod %s recorded as failed, but the sync saw %+v", uid, p)
		case p.Status.Phase == corev1.PodFailed:
			if c.ignores(p) {
				c.errorf("pod %s recorded as failed though an Ignore rule matches it", p.Name)
			}
		case p.Status.Phase == corev1.PodSucceeded:
			c.errorf("succeeded pod %s recorded as failed", p.Name)
		case failing:
			// Once the job fails, its unfinished pods count as failed.
		case jobpod.Classify(job, jobpod.Read(p)).Stopped:
			// Its failures in place failed its index: recorded, then stopped.
		case p.DeletionTimestamp != nil && !onlyReplaceFailed(job):
			// Replaced as soon as terminating: counted failed at once.
		default:
			c.errorf("unfinished pod %s recorded as failed", p.Name)
		}
		c.recordedFail.Insert(uid)
	}
	// Counts are exact: whatever was ever recorded is counted or still
	// recorded, never both, never neither.
	if got, want := int(st.Failed)+len(uFail), c.recordedFail.Len()+c.inPlace; got != want {
		c.errorf("failed %d + uncounted %d = %d, but %d pods were recorded as failed, with %d failures in place", st.Failed, len(uFail), got, c.recordedFail.Len(), c.inPlace)
	}
	// A restart of every index (restartIndexes All) starts the successes
	// over; nothing else lowers a counter.
	if st.Succeeded < before.Succeeded && st.Restarts == before.Restarts || st.Failed < before.Failed {
		c.errorf("a counter went down: succeeded %d -> %d, failed %d -> %d", before.Succeeded, st.Succeeded, before.Failed, st.Failed)
	}

	completed, err1 := indexset.Parse(st.CompletedIndexes, job.Spec.Completions)
	failed, err2 := indexset.Parse(ptr.Deref(st.FailedIndexes, ""), job.Spec.Completions)
	if err1 != nil || err2 != nil {
		c.errorf("unreadable index sets: %v, %v", err1, err2)
	}
	// A succeeded pod is recorded by its index, and counted with it.
	if int(st.Succeeded) != completed.Len() {
		c.errorf("succeeded %d, but %d indexes completed (%q)", st.Succeeded, completed.Len(), st.CompletedIndexes)
	}
	for _, p := range c.seen {
		if ix, ok := jobpod.Index(p); ok && p.Status.Phase == corev1.PodSucceeded && completed.Has(ix) &&
			jobpod.Read(p).Tracked && !jobpod.Read(p).Discarded {
			c.recordedSucc.Insert(p.UID)
		}
	}
	failed.Each(func(ix int32) bool { c.failedIdx.Insert(ix); return true })
	if completed.CountIn(failed) != 0 {
		c.errorf("completedIndexes %q and failedIndexes %q overlap", st.CompletedIndexes, *st.FailedIndexes)
	}
	if st.FailedIndexes != nil && job.Spec.BackoffLimitPerIndex == nil {
		c.errorf("failedIndexes set without backoffLimitPerIndex")
	}
	for _, typ := range []string{ibjv1.ConditionComplete, ibjv1.ConditionFailed} {
		if !isTrue(&st, typ) {
			continue
		}
		if len(uFail) > 0 {
			c.errorf("%s while pods are uncounted", typ)
		}
		if !isTrue(&before, typ) {
			c.checkAllFinished(typ)
		}
		// A job that is not suspended has started. (Suspend clears
		// startTime, so a job that ends while suspended, when a pod that
		// was already terminating fails, has none.)
		if st.StartTime == nil && !isTrue(&before, typ) && !ptr.Deref(job.Spec.Suspend, false) {
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

// checkAllFinished checks that the job ends (typ) with no pod of it on the
// API server still running.
func (c *cluster) checkAllFinished(typ string) {
	list := &corev1.PodList{}
	if err := c.api.List(context.Background(), list, client.InNamespace(c.job.Namespace)); err != nil {
		c.errorf("listing pods: %v", err)
	}
	for i := range list.Items {
		if p := &list.Items[i]; !jobpod.Read(p).Finished() {
			c.errorf("%s while pod %s has not finished (terminating=%v)", typ, p.Name, p.DeletionTimestamp != nil)
		}
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
	// A new generation (a RestartJob restart) starts the counts afresh.
	generation := p.status.Restarts
	for uid := range allFailed {
		if c.genOfUID[uid] == generation {
			failures[c.indexOfUID[uid]]++
		}
	}
	seen := sets.New[int32]()
	for _, pc := range p.create {
		if pc.Index < 0 || pc.Index >= n {
			c.errorf("create for index %d of %d", pc.Index, n)
		}
		// A restart of every index (restartIndexes All) runs the finished
		// ones again.
		restartedAll := p.status.Restarts > in.job.Status.Restarts
		if !restartedAll && (inCompleted.Has(pc.Index) || inFailed.Has(pc.Index)) || outCompleted.Has(pc.Index) || outFailed.Has(pc.Index) {
			c.errorf("create for finished index %d", pc.Index)
		}
		if seen.Has(pc.Index) {
			c.errorf("two creates for index %d in one sync", pc.Index)
		}
		seen.Insert(pc.Index)
		if IsFinished(in.job) || ptr.Deref(in.job.Spec.Suspend, false) || !in.expectationsSatisfied {
			c.errorf("create for index %d while finished, suspended or with expectations pending", pc.Index)
		}
		if c.job.Spec.BackoffLimitPerIndex != nil && pc.Failures < failures[pc.Index] && !c.stripped.Has(pc.Index) {
			c.errorf("index %d retried with failure count %d, but %d of its failures were counted", pc.Index, pc.Failures, failures[pc.Index])
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
	generations := sets.New[int32]()
	for _, p := range c.pods {
		if jobpod.Read(p).Finished() {
			continue
		}
		generations.Insert(jobpod.Read(p).Generation)
		unfinished++
		if jobpod.Read(p).Active() {
			active++
		}
		ix, _ := jobpod.Index(p)
		perIndex[ix]++
		if onlyFailed && perIndex[ix] > 1 {
			c.errorf("with podReplacementPolicy Failed, index %d has %d unfinished pods", ix, perIndex[ix])
		}
	}
	if active > parallelism {
		c.errorf("%d active pods, parallelism %d", active, parallelism)
	}
	// A restart's generations never overlap: every pod that has not
	// finished is of one generation.
	if generations.Len() > 1 {
		c.errorf("unfinished pods of generations %v at once", sets.List(generations))
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
	c.crashAt, c.fault, c.lagging = 0, nil, false
	if ptr.Deref(c.job.Spec.Suspend, false) {
		c.setSuspend(false)
	}
	for i := 0; i < 200 && !c.jobDeleted && !IsFinished(c.job); i++ {
		for _, p := range c.pods {
			switch {
			case jobpod.Read(p).Active():
				c.succeed(p)
			case jobpod.Read(p).Terminating():
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
		case c.genOfUID[uid] < st.Restarts:
			// Ended by a restart, or the failure that made it: counted
			// by status.restarts alone.
		case onlyFailed && !c.recordedFail.Has(uid):
			c.errorf("pod %s failed holding the finalizer, but its failure was never counted", uid)
		case !c.recordedFail.Has(uid) && !c.recordedSucc.Has(uid) && !c.failedIdx.Has(c.indexOfUID[uid]):
			c.errorf("pod %s ended holding the finalizer, but its end was never counted", uid)
		}
	}
	completed, _ := indexset.Parse(st.CompletedIndexes, c.job.Spec.Completions)
	if int(st.Succeeded) != completed.Len() || int(st.Failed) != c.recordedFail.Len()+c.inPlace {
		c.errorf("finished with succeeded=%d failed=%d, completed indexes %d, failures in the ledger %d (in place %d)", st.Succeeded, st.Failed, completed.Len(), c.recordedFail.Len()+c.inPlace, c.inPlace)
	}
	for _, p := range c.pods {
		if jobpod.Read(p).Finalized() {
			c.errorf("finished job still holds pod %s (finalizers %v)", p.Name, p.Finalizers)
		}
	}
}

// fuzzJob decodes a small job from four bytes.
func fuzzJob(b []byte) (*ibjv1.IndexedBatchJob, func(*corev1.Pod) bool) {
	for len(b) < 4 {
		b = append(b, 0)
	}
	w := harness.MakeIndexedBatchJob("fz", "ns").UID("job-uid").
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
			harness.OnExitCodes(batchv1.PodFailurePolicyActionIgnore, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 42),
		}
		if ignoreDisruption {
			rules = append(rules, harness.OnPodCondition(batchv1.PodFailurePolicyActionIgnore, corev1.DisruptionTarget, corev1.ConditionTrue))
		}
		if perIndex {
			rules = append(rules, harness.OnExitCodes(batchv1.PodFailurePolicyActionFailIndex, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 43))
		}
		if flags&32 != 0 {
			rules = append(rules, harness.OnExitCodes(batchv1.PodFailurePolicyActionFailJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 44))
		}
		if b[3]&32 != 0 {
			// Exit code 2 restarts the job's pods together, at most twice.
			rules = append(rules, harness.OnExitCodes(ibjv1.PodFailurePolicyActionRestartJob, "", batchv1.PodFailurePolicyOnExitCodesOpIn, 2))
			w.MaxRestarts(2)
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
		w.SuccessPolicy(harness.SucceededCount(2 + int32(b[0]%3)))
	}
	if b[3]&2 != 0 {
		w.ActiveDeadlineSeconds(600)
	}
	if b[3]&4 != 0 {
		w.Suspend(true)
	}
	if b[3]&16 != 0 {
		w.RetryBackoff(10, 60)
	}
	job := w.Obj()
	if b[3]&8 != 0 && withPolicy {
		// Named rules, the Ignore rule's failures retried after 30 s.
		for i := range job.Spec.PodFailurePolicy.Rules {
			job.Spec.PodFailurePolicy.Rules[i].Name = fmt.Sprintf("rule_%d", i)
		}
		job.Spec.PodFailurePolicy.Rules[0].RetryDelaySeconds = ptr.To[int32](30)
	}
	if b[3]&16 != 0 {
		job.Spec.RetryBackoff.CreateRefusedDelaySeconds = ptr.To[int32](20)
	}
	if b[3]&64 != 0 && job.Spec.MaxRestarts != nil {
		rules := job.Spec.PodFailurePolicy.Rules
		rules[len(rules)-1].RestartIndexes = ibjv1.RestartAllIndexes
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
	return job, ignores
}

// FuzzSyncInvariants drives a small job through a sequence of pod events,
// failed writes (crashes and API outages, see faultOf) and clock steps
// decoded from the input, running the controller (syncJob and the
// reconciler's apply) after each, and checks the invariants of docs/guarantees.md at
// every step and once the controller settled.
//
// Input: 4 bytes of job configuration (see fuzzJob), then pairs (op, arg).
// op%11 picks the event; op ≥ 128 skips the sync after it, so several
// events can pile up between syncs.
func FuzzSyncInvariants(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 10, 0, 0, 0, 10, 0, 0, 1, 0, 2})
	f.Add([]byte{4, 3, 0, 0, 1, 0, 6, 2, 1, 0, 6, 10, 1, 0})
	// The status write fails as a pod's success is recorded: its finalizer stays.
	f.Add([]byte{3, 0, 6, 0, 0x85, 21, 0, 0, 10, 0, 10, 0})
	// One of two creates fails: the status counts the pod that exists.
	f.Add([]byte{8, 0, 6, 0, 0x85, 25, 0x80, 0, 0, 1, 10, 0, 10, 0})
	// A crash between stripping a suspended pod's finalizer and deleting it.
	f.Add([]byte{3, 0, 6, 0, 0x85, 9, 7, 0, 10, 0, 7, 0, 10, 0})
	// Named rules with a retry delay on Ignore, exit code 42 ignored twice,
	// and a refused create waiting createRefusedDelaySeconds.
	f.Add([]byte{4, 0x50, 0, 0x18, 1, 0x10, 6, 1, 1, 0x10, 0x85, 25, 0, 0, 6, 3, 10, 0})
	// Exit code 2 restarts the pods together: the others are stopped, the
	// kubelet ends them, and the new generation runs; with restartIndexes
	// All and backoffLimitPerIndex, after a success.
	f.Add([]byte{4, 0x10, 5, 0x20, 1, 0x41, 3, 0x00, 3, 0x02, 4, 0, 6, 1, 0, 0, 0, 1, 0, 2, 0, 3, 10, 0})
	f.Add([]byte{4, 0x13, 5, 0x60, 0, 0x00, 1, 0x42, 0x85, 0x31, 3, 0x01, 4, 0, 6, 1, 1, 0x43, 3, 0, 4, 0, 6, 2, 10, 0})
	// Containers restarted in place (op 10 with an odd arg) while pods
	// run, with backoffLimitPerIndex 1 and 2, then successes and a crash.
	f.Add([]byte{4, 0x03, 0, 0, 10, 0x01, 10, 0x01, 10, 0x11, 4, 0, 0, 0x11, 0, 0x02, 0x85, 0x31, 0, 0x03, 6, 1, 10, 0})
	f.Add([]byte{3, 0x05, 0, 0x20, 10, 0x01, 1, 0x40, 10, 0x03, 3, 0, 4, 0, 6, 1, 10, 0x01, 0, 0x00, 10, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 400 {
			return
		}
		// Half the inputs keep the indexes' states in a map (indexTable).
		sparse := len(data)%2 == 1
		job, ignores := fuzzJob(data)
		if len(data) >= 4 {
			data = data[4:]
		} else {
			data = nil
		}
		c := newCluster(t, job)
		c.ignores, c.sparseIndexes = ignores, sparse
		codes := []int32{1, 42, 43, 44, 2, 137}
		c.sync()
		for i := 0; i+1 < len(data) && !t.Failed(); i += 2 {
			op, arg := data[i], data[i+1]
			ix := int32(arg) % job.Spec.Completions
			n := int(arg >> 3)
			unfinished := func(p *corev1.Pod) bool { return !jobpod.Read(p).Finished() }
			switch op & 0x7f % 11 {
			case 0:
				c.succeed(c.pick(ix, n, unfinished))
			case 1:
				c.fail(c.pick(ix, n, unfinished), codes[int(arg>>4)%len(codes)], false)
			case 2:
				c.remove(c.pick(ix, n, func(p *corev1.Pod) bool { return jobpod.Read(p).Active() }))
			case 3:
				c.fail(c.pick(ix, n, func(p *corev1.Pod) bool { return jobpod.Read(p).Terminating() }), 137, false)
			case 4:
				c.kubelet()
			case 5:
				c.fault = faultOf(arg)
			case 6:
				c.advance(time.Duration(arg%64+1) * 5 * time.Second)
			case 7:
				c.setSuspend(!ptr.Deref(c.job.Spec.Suspend, false))
			case 8:
				c.lagging = true
			case 9:
				c.fail(c.pick(ix, n, unfinished), 137, true)
			case 10:
				if p := c.pick(ix, n, func(p *corev1.Pod) bool { return jobpod.Read(p).Active() }); arg&1 != 0 && p != nil {
					c.restartInPlace(p, 3)
				}
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
