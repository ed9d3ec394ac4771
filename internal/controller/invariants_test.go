package controller

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clienttesting "k8s.io/client-go/testing"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// cluster plays the API server (a controller-runtime fake client) and the
// kubelet around the controller: every sync fills the reconciler's pod
// cache with the pods the API server holds, runs syncJob and hands the plan
// to the reconciler's own apply, whose writes pass an interceptor that
// injects faults and checks each write as it lands. It keeps a ledger of
// what the controller must count and checks the invariants of docs/guarantees.md
// after every step.
type cluster struct {
	t testing.TB
	// api is the API server, written directly by the kubelet and the users;
	// the reconciler writes through an interceptor around it.
	api   client.WithWatch
	r     *Reconciler
	cache *fixedPods // r.pods, filled with c.pods before every sync
	clock *testingclock.FakePassiveClock

	job     *ibjv1.IndexedBatchJob // as the API server holds it
	pods    []*corev1.Pod          // as the API server holds them, in creation order
	seen    []*corev1.Pod          // the pods as the last sync saw them
	now     time.Time
	backoff Backoff
	uids    int
	syncs   int

	jobDeleted bool
	// crashAt stops the next apply after that step (1 deletes, 2 creates,
	// 3 status write, 4 finalizer removals), as a controller restart would:
	// every later write fails, and the following sync runs in a new
	// reconciler from what reached the API server.
	crashAt int
	// fault, if set, is the fault of the next apply (crashAt is one kind).
	fault *writeFault
	// lagging makes the next sync see unsatisfied expectations.
	lagging bool
	// ignores is the oracle of the failure policy's Ignore rules.
	ignores func(*corev1.Pod) bool
	// sparseIndexes makes every sync keep the indexes' states in a map
	// (syncInput.sparseIndexes).
	sparseIndexes bool

	// applying is the apply under way, for the interceptor.
	applying *applying
	// mu guards what the interceptor's hooks change: apply writes from
	// several goroutines.
	mu sync.Mutex
	// order numbers the pods in creation order; deletedAt is when each
	// deleted pod was deleted, by the cluster's clock.
	order     map[types.UID]int
	deletedAt map[types.UID]time.Time

	// The ledger. recordedFail: every UID ever written to
	// uncountedTerminatedPods; recordedSucc: every succeeded pod whose index
	// a written status holds as completed; failedIdx: the indexes a written
	// status holds as failed. mustCount: pods the sim saw end (succeeded,
	// failed, or deleted under TerminatingOrFailed) while holding the
	// finalizer, mapped to whether only "failed" is a correct record.
	recordedSucc, recordedFail sets.Set[types.UID]
	// inPlace is what status.failed must hold for failures in place
	// beside recordedFail: each pod's, as the sync that recorded its UID
	// saw it (recordedInPlace).
	inPlace         int
	recordedInPlace sets.Set[types.UID]
	failedIdx       sets.Set[int32]
	mustCount       map[types.UID]bool
	indexOfUID      map[types.UID]int32
	// genOfUID is each pod's generation (its restart-attempt label): a pod
	// of a generation before the job's last restart counts for nothing.
	genOfUID map[types.UID]int32
	// stripped are the indexes of which the controller discarded a pod
	// (suspend). Such a pod may carry the index's failure count away: as
	// upstream, the earlier failed pod was let go once it was replaced.
	stripped sets.Set[int32]
}

// kubeletFinalizer stands for the kubelet's part in a graceful deletion.
// The API server keeps a deleted pod until its kubelet has stopped it; the
// fake client deletes an object without finalizers at once. Every pod gets
// this finalizer when it is created, and kubelet() removes it.
const kubeletFinalizer = "test.indexedjob.dev/kubelet"

// simScheme and simDecoder serve every cluster's fake client.
var (
	simScheme = sync.OnceValue(func() *runtime.Scheme {
		s := runtime.NewScheme()
		utilruntime.Must(corev1.AddToScheme(s))
		utilruntime.Must(ibjv1.AddToScheme(s))
		return s
	})
	simDecoder = sync.OnceValue(func() runtime.Decoder {
		return serializer.NewCodecFactory(simScheme()).UniversalDecoder()
	})
)

func newCluster(t testing.TB, job *ibjv1.IndexedBatchJob) *cluster {
	if job.UID == "" {
		job.UID = "job-uid"
	}
	if job.Generation == 0 {
		job.Generation = 1
	}
	c := &cluster{
		t: t, job: job, now: testNow, backoff: jobpod.DefaultBackoff,
		clock:        testingclock.NewFakePassiveClock(testNow),
		order:        map[types.UID]int{},
		deletedAt:    map[types.UID]time.Time{},
		recordedSucc: sets.New[types.UID](), recordedFail: sets.New[types.UID](), failedIdx: sets.New[int32](),
		mustCount: map[types.UID]bool{}, indexOfUID: map[types.UID]int32{}, recordedInPlace: sets.New[types.UID](),
		genOfUID: map[types.UID]int32{},
		stripped: sets.New[int32](),
	}
	c.ignores = func(pod *corev1.Pod) bool {
		return actionOf(matchFailurePolicy(c.job.Spec.PodFailurePolicy, jobpod.Read(pod))) == batchv1.PodFailurePolicyActionIgnore
	}
	// A plain object tracker: the default one keeps managedFields, which
	// costs milliseconds a write and nothing here reads.
	c.api = fake.NewClientBuilder().WithScheme(simScheme()).
		WithObjectTracker(clienttesting.NewObjectTracker(simScheme(), simDecoder())).
		WithStatusSubresource(&ibjv1.IndexedBatchJob{}).
		Build()
	// The pod cache is never started: every sync fills it.
	c.cache = newFixedPods()
	c.r = c.newReconciler()
	if err := c.api.Create(context.Background(), job.DeepCopy()); err != nil {
		t.Fatal(err)
	}
	c.readJob()
	return c
}

// newReconciler is the controller process; a crash starts a new one, with
// expectations that know nothing of the old one's writes.
func (c *cluster) newReconciler() *Reconciler {
	r := NewReconciler(interceptor.NewClient(c.api, c.interceptors()), nil, c.clock, c.backoff)
	r.pods = c.cache
	return r
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
			p.DeletionTimestamp != nil, jobpod.Read(p).Tracked, jobpod.Read(p).Discarded, p.Annotations[ibjv1.IndexFailureCountAnnotation])
	}
	return b.String()
}

// readJob takes the job from the API server into c.job, or notes that it
// is gone.
func (c *cluster) readJob() {
	c.t.Helper()
	job := &ibjv1.IndexedBatchJob{}
	switch err := c.api.Get(context.Background(), client.ObjectKeyFromObject(c.job), job); {
	case apierrors.IsNotFound(err):
		c.jobDeleted = true
	case err != nil:
		c.t.Fatalf("reading the job: %v", err)
	default:
		c.job = job
	}
}

// reload takes the named pod from the API server into c.pods, or drops it
// from there if it is gone. c.pods is replaced, not changed, so that a loop
// over it is not disturbed.
func (c *cluster) reload(name string) {
	c.t.Helper()
	i := slices.IndexFunc(c.pods, func(p *corev1.Pod) bool { return p.Name == name })
	pod := &corev1.Pod{}
	switch err := c.api.Get(context.Background(), client.ObjectKey{Namespace: c.job.Namespace, Name: name}, pod); {
	case apierrors.IsNotFound(err):
		if i >= 0 {
			c.pods = slices.Concat(c.pods[:i], c.pods[i+1:])
		}
	case err != nil:
		c.t.Fatalf("reading pod %s: %v", name, err)
	case i >= 0:
		c.pods = slices.Clone(c.pods)
		c.pods[i] = c.restamp(pod)
	default:
		c.pods = append(slices.Clone(c.pods), c.restamp(pod))
		slices.SortFunc(c.pods, func(a, b *corev1.Pod) int { return cmp.Compare(c.order[a.UID], c.order[b.UID]) })
	}
}

// restamp gives a deleted pod the cluster's time of its deletion: the fake
// client stamps a deletion with the wall clock.
func (c *cluster) restamp(p *corev1.Pod) *corev1.Pod {
	if at, ok := c.deletedAt[p.UID]; ok && p.DeletionTimestamp != nil {
		p.DeletionTimestamp = &metav1.Time{Time: at}
	}
	return p
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
		if i, ok := jobpod.Index(p); ok && i == ix {
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
	if !jobpod.Read(p).Tracked || jobpod.Read(p).Discarded {
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

// The kubelet and the users. They act on the pod with p's UID as the API
// server holds it, if it is still there.

// update writes the pod as changed by change: its status as the kubelet
// does, or else the object.
func (c *cluster) update(p *corev1.Pod, status bool, change func(*corev1.Pod)) {
	c.t.Helper()
	ctx := context.Background()
	live := &corev1.Pod{}
	if err := c.api.Get(ctx, client.ObjectKeyFromObject(p), live); err != nil {
		c.t.Fatalf("reading pod %s: %v", p.Name, err)
	}
	change(live)
	var err error
	if status {
		err = c.api.Status().Update(ctx, live)
	} else {
		err = c.api.Update(ctx, live)
	}
	if err != nil {
		c.t.Fatalf("updating pod %s: %v", p.Name, err)
	}
}

// unfinished is the pod with p's UID if it is there and has not finished.
func (c *cluster) unfinished(p *corev1.Pod) *corev1.Pod {
	if p == nil {
		return nil
	}
	if live := c.pod(p.UID); live != nil && !jobpod.Read(live).Finished() {
		return live
	}
	return nil
}

// end lets the kubelet end the pod, its containers terminated now with
// code (phase Succeeded for 0, Failed otherwise), as the tests' one pod
// simulator writes it.
func (c *cluster) end(p *corev1.Pod, code int32, disruption bool) {
	c.t.Helper()
	live := c.unfinished(p)
	if live == nil {
		return
	}
	c.update(live, true, func(pod *corev1.Pod) { podsim.MarkTerminated(pod, code, disruption, c.now) })
	c.reload(live.Name)
	c.observe(c.pod(live.UID))
}

func (c *cluster) succeed(p *corev1.Pod) { c.end(p, 0, false) }

func (c *cluster) fail(p *corev1.Pod, code int32, disruption bool) { c.end(p, code, disruption) }

// remove is a delete call: the pod gets its deletion timestamp.
func (c *cluster) remove(p *corev1.Pod) {
	c.t.Helper()
	if p == nil {
		return
	}
	live := c.pod(p.UID)
	if live == nil || live.DeletionTimestamp != nil {
		return
	}
	if err := c.api.Delete(context.Background(), live); err != nil {
		c.t.Fatalf("deleting pod %s: %v", live.Name, err)
	}
	c.deleted(live.Name)
	c.reload(live.Name)
}

// deleted notes the deletion of the named pod, now, and the end it may be.
func (c *cluster) deleted(name string) {
	pod := &corev1.Pod{}
	if err := c.api.Get(context.Background(), client.ObjectKey{Namespace: c.job.Namespace, Name: name}, pod); err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.deletedAt[pod.UID]; !ok {
		c.deletedAt[pod.UID] = c.now
	}
	c.observe(c.restamp(pod))
}

// kubelet lets every deleted pod without the tracking finalizer go.
func (c *cluster) kubelet() {
	c.t.Helper()
	for _, p := range c.pods {
		if p.DeletionTimestamp != nil && slices.Equal(p.Finalizers, []string{kubeletFinalizer}) {
			c.update(p, false, func(pod *corev1.Pod) { pod.Finalizers = nil })
			c.reload(p.Name)
		}
	}
}

func (c *cluster) advance(d time.Duration) { c.now = c.now.Add(d) }

func (c *cluster) setSuspend(suspend bool) {
	c.t.Helper()
	job := c.job.DeepCopy()
	job.Spec.Suspend = ptr.To(suspend)
	job.Generation++
	if err := c.api.Update(context.Background(), job); err != nil {
		c.t.Fatalf("suspending the job: %v", err)
	}
	c.job = job
}

// sync runs the controller once: it puts the job's pods into the pod cache,
// as the informer's transform would, lets syncJob decide, and applies the
// plan with the reconciler's apply. c.job and c.pods are what the API
// server holds: whoever writes reads back what it wrote, the kubelet and
// the users at once, the controller after its apply. (A list of the pods
// before each sync would read nothing new, at half the fuzzer's speed.)
func (c *cluster) sync() plan {
	c.t.Helper()
	if c.jobDeleted {
		return plan{}
	}
	ctx := log.IntoContext(context.Background(), logr.Discard())
	c.cache.replace(c.pods)
	c.seen = c.pods
	c.clock.SetTime(c.now)
	c.r.backoff = c.backoff
	job := c.job.DeepCopy()
	satisfied := c.r.observeCache(job)
	in, p, err := c.r.decide(ctx, job, satisfied && !c.lagging, func(in *syncInput) {
		// The cache lists in no order; creation order keeps a run
		// repeatable.
		slices.SortFunc(in.pods, func(a, b *jobpod.Pod) int { return cmp.Compare(c.order[a.UID], c.order[b.UID]) })
		in.sparseIndexes = c.sparseIndexes
	})
	if err != nil {
		c.t.Fatal(err)
	}
	fault := c.fault
	if c.crashAt > 0 {
		fault = &writeFault{step: c.crashAt + 1, crash: true}
	}
	c.lagging, c.crashAt, c.fault = false, 0, nil

	c.checkPlan(in, p)
	a := newApplying(in, p, fault, c.seen)
	c.applying = a
	res, err := c.r.apply(ctx, job, p)
	c.applying = nil
	refused := a.refusedIn(stepDelete, stepDiscard)
	if d := jobpod.CreateRefusedDelay(job); d > 0 && a.refusedIn(stepCreate, stepCreate) > 0 {
		// The job's createRefusedDelaySeconds: refused creates are tried
		// again by a requeue after it, not by the error's retry.
		refused -= a.refusedIn(stepCreate, stepCreate)
		if err == nil && (res.RequeueAfter <= 0 || res.RequeueAfter > d) {
			c.errorf("creates were refused, but the sync comes back after %v, not within createRefusedDelaySeconds (%v)", res.RequeueAfter, d)
		}
	}
	switch {
	case refused == 0 && err != nil:
		c.errorf("apply failed: %v", err)
	case refused > 0 && err == nil:
		c.errorf("%d writes failed, but apply reported no error (nothing would retry them)", refused)
	}
	c.uids += len(p.create)
	if fault != nil && fault.crash {
		// A new process: an empty background queue, and a pod cache
		// filled afresh, with no pod settled.
		c.r = c.newReconciler()
		c.cache.Unsettle(c.job.Namespace, c.job.Name)
	}
	c.readJob()
	for _, name := range sets.List(a.written) {
		c.reload(name)
	}
	// The background releases run after most syncs, and lag behind one in
	// three, when a sync and the next see their pods still held.
	if c.syncs++; c.syncs%3 != 0 {
		c.releaseInBackground()
	}
	c.checkState(p)
	// A status that only moved counters may be held back a moment
	// (holdCounters): its active count is then the last one written.
	if !IsFinished(in.job) && a.refusedIn(stepDelete, stepDelete)+a.refusedIn(stepStatus, stepStatus) == 0 && p.holdStatus == 0 {
		c.checkActive()
	}
	return p
}

// releaseInBackground runs the reconciler's background finalizer removals
// queued so far, each checked as apply's are.
func (c *cluster) releaseInBackground() {
	ctx := log.IntoContext(context.Background(), logr.Discard())
	a := newApplying(syncInput{job: c.job}, plan{}, nil, c.pods)
	a.background = true
	c.applying = a
	c.r.later.drain(ctx)
	c.applying = nil
	for _, name := range sets.List(a.written) {
		c.reload(name)
	}
}

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

// The steps of apply, in its order, as a writeFault names them.
const (
	stepDelete = 1 + iota
	stepCreate
	stepStatus
	stepRelease
	stepDiscard
)

// writeFault is what goes wrong in one apply. The writes are ordered by
// step, and within a step by the plan's order of their pods (a deletion
// is two writes when it strips the finalizer first: its patch, then its
// delete); the interceptor knows a write's place from the pod it names, so
// a fault strikes the same writes however apply's goroutines interleave.
type writeFault struct {
	step int // the first step whose writes fail
	// within is how many writes of that step still pass.
	within int
	// crash: every write after the fault fails too, and the next sync runs
	// in a new reconciler. Else it is an outage of that step only, and the
	// reconciler lives on.
	crash bool
}

// faultOf decodes a fault from one byte. 0…3 crash after step 1…4, as
// crashAt does; 4 crashes before the first write.
func faultOf(b byte) *writeFault {
	return &writeFault{step: int(b+1)%5 + 1, within: int(b / 5 % 4), crash: b/20%2 == 0}
}

// allows tells whether the write at place pos of step reaches the server.
func (f *writeFault) allows(step, pos int) bool {
	switch {
	case f == nil || step < f.step:
		return true
	case step > f.step:
		return !f.crash
	default:
		return pos < f.within
	}
}

// applying is what the interceptor knows of the apply under way: the plan,
// the places of its pods' writes, and the fault.
type applying struct {
	in    syncInput
	plan  plan
	fault *writeFault
	// whole: every write passes, and none is placed (a plan that deletes
	// the job, whose writes are not apply's steps).
	whole bool
	// background: the writes are the reconciler's background finalizer
	// removals, which any pod may get; each is checked all the same.
	background bool
	// seen are the pods as the sync saw them, by name; written are those
	// of them a write changed, and the pods it created.
	seen    map[string]*corev1.Pod
	written sets.Set[string]
	// The place of each pod in the plan's lists, by name; strips are the
	// deletions that strip the finalizer first.
	deletes, creates, releases, discards map[string]int
	strips                               sets.Set[string]
	// refused counts the writes the fault struck, by step.
	refused [stepDiscard + 1]atomic.Int32
}

func newApplying(in syncInput, p plan, fault *writeFault, seen []*corev1.Pod) *applying {
	a := &applying{
		in: in, plan: p, fault: fault, seen: map[string]*corev1.Pod{}, written: sets.New[string](),
		deletes: map[string]int{}, creates: map[string]int{}, releases: map[string]int{}, discards: map[string]int{},
		strips: sets.New[string](), whole: p.deleteJob,
	}
	for _, pod := range seen {
		a.seen[pod.Name] = pod
	}
	for i, d := range p.delete {
		a.deletes[d.pod.Name] = 2 * i
		if d.stripFinalizer {
			a.strips.Insert(d.pod.Name)
		}
	}
	for i, pc := range p.create {
		a.creates[podName(in.job, pc.Index, pc.Attempt)] = i
	}
	for i, pod := range p.removeFinalizer {
		a.releases[pod.Name] = i
	}
	for i, pod := range p.countHeld {
		a.releases[pod.Name] = len(p.removeFinalizer) + i
	}
	for i, pod := range p.discard {
		a.discards[pod.Name] = i
	}
	return a
}

// refusedIn is how many writes of the steps from..to the fault struck.
func (a *applying) refusedIn(from, to int) int {
	n := 0
	for step := from; step <= to; step++ {
		n += int(a.refused[step].Load())
	}
	return n
}

// refuse returns the error of a write the fault strikes, nil for one that
// may reach the server.
func (a *applying) refuse(step, pos int) error {
	if a.whole || a.fault.allows(step, pos) {
		return nil
	}
	a.refused[step].Add(1)
	if a.fault.crash {
		return errors.New("injected: the controller died before this write")
	}
	return apierrors.NewServiceUnavailable("injected outage")
}

// interceptors sit between the reconciler and the API server.
func (c *cluster) interceptors() interceptor.Funcs {
	return interceptor.Funcs{
		Create:            c.createPod,
		Delete:            c.deletePod,
		Patch:             c.patchPod,
		SubResourceUpdate: c.updateStatus,
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			c.errorf("apply updated %T %s; it only patches pods and updates the job's status", obj, obj.GetName())
			return cl.Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			c.errorf("apply patched %s of %T %s; the status is written with an update", sub, obj, obj.GetName())
			return cl.SubResource(sub).Patch(ctx, obj, patch, opts...)
		},
	}
}

// current is the apply under way. A write outside one is an error (there
// are no foreign pods to release), and passes unplaced and unchecked.
func (c *cluster) current(verb string, obj client.Object) *applying {
	if c.applying == nil {
		c.errorf("%s %T %s outside apply", verb, obj, obj.GetName())
		a := newApplying(syncInput{job: c.job}, plan{}, nil, nil)
		a.whole = true
		return a
	}
	return c.applying
}

// createPod is what the API server does on a pod create: it gives the pod
// a UID, stamps the creation, sets the phase Pending (and the kubelet's
// finalizer), and refuses a name that exists.
func (c *cluster) createPod(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	a := c.current("create", obj)
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		c.errorf("apply created %T %s", obj, obj.GetName())
		return cl.Create(ctx, obj, opts...)
	}
	pos, planned := a.creates[pod.Name]
	if !planned && !a.whole {
		c.errorf("created pod %s, which the plan does not create", pod.Name)
	}
	if err := a.refuse(stepCreate, pos); err != nil {
		return err
	}
	seq := c.uids + pos + 1
	pod.UID = types.UID(fmt.Sprintf("u%03d", seq))
	pod.CreationTimestamp = metav1.NewTime(c.now)
	pod.Finalizers = append(pod.Finalizers, kubeletFinalizer)
	pod.Status.Phase = corev1.PodPending
	err := cl.Create(ctx, pod, opts...)
	switch {
	case apierrors.IsAlreadyExists(err):
		c.errorf("created pod %s, which exists (attempt numbers repeat)", pod.Name)
	case err == nil:
		ix, _ := jobpod.Index(pod)
		c.mu.Lock()
		c.order[pod.UID], c.indexOfUID[pod.UID] = seq, ix
		c.genOfUID[pod.UID] = jobpod.Read(pod).Generation
		a.written.Insert(pod.Name)
		c.mu.Unlock()
	}
	return err
}

// deletePod deletes a pod (or, for a plan that deletes it, the job).
func (c *cluster) deletePod(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
	a := c.current("delete", obj)
	if _, isJob := obj.(*ibjv1.IndexedBatchJob); isJob {
		if !a.plan.deleteJob {
			c.errorf("deleted the job, which the plan does not")
		}
		return cl.Delete(ctx, obj, opts...)
	}
	pos, planned := a.deletes[obj.GetName()]
	if !planned && !a.whole {
		c.errorf("deleted pod %s, which the plan does not delete", obj.GetName())
	}
	if err := a.refuse(stepDelete, pos+1); err != nil {
		return err
	}
	err := cl.Delete(ctx, obj, opts...)
	switch {
	case apierrors.IsNotFound(err):
		c.errorf("deleting pod %s that is gone", obj.GetName())
	case err == nil:
		c.deleted(obj.GetName())
		c.mu.Lock()
		a.written.Insert(obj.GetName())
		c.mu.Unlock()
	}
	return err
}

// patchPod lets a finalizer patch through, then checks what it did.
func (c *cluster) patchPod(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	a := c.current("patch", obj)
	name := obj.GetName()
	data, err := patch.Data(obj)
	if err != nil {
		return err
	}
	var step, pos int
	planned := true
	switch discard := bytes.Contains(data, []byte(ibjv1.DiscardedAnnotation)); {
	case discard && a.strips.Has(name):
		step, pos = stepDelete, a.deletes[name]
	case discard:
		step = stepDiscard
		pos, planned = a.discards[name]
	case a.background:
		step, planned = stepRelease, true
	default:
		step = stepRelease
		pos, planned = a.releases[name]
	}
	if !planned && !a.whole {
		c.errorf("patched pod %s, which the plan does not release", name)
	}
	if err := a.refuse(step, pos); err != nil {
		return err
	}
	if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
		return err
	}
	c.mu.Lock()
	a.written.Insert(name)
	c.mu.Unlock()
	if before := a.seen[name]; before != nil {
		c.checkRelease(a, before, obj)
	}
	return nil
}

// updateStatus lets a status write through, then checks what it says.
func (c *cluster) updateStatus(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	a := c.current("update "+sub, obj)
	job, ok := obj.(*ibjv1.IndexedBatchJob)
	if !ok || sub != "status" {
		c.errorf("apply updated %s of %T %s", sub, obj, obj.GetName())
		return cl.SubResource(sub).Update(ctx, obj, opts...)
	}
	if err := a.refuse(stepStatus, 0); err != nil {
		return err
	}
	if err := cl.SubResource(sub).Update(ctx, obj, opts...); err != nil {
		return err
	}
	c.checkStatus(a.in, job.Status)
	return nil
}

// checkRelease checks a patch of a pod (before is the pod as the sync saw
// it) that took its tracking finalizer away: only that finalizer goes, and
// a pod whose end counts goes only once the status holds its result.
func (c *cluster) checkRelease(a *applying, before *corev1.Pod, after client.Object) {
	if slices.Contains(before.Finalizers, kubeletFinalizer) && !slices.Contains(after.GetFinalizers(), kubeletFinalizer) {
		c.errorf("the patch of pod %s removed another finalizer: %v -> %v", before.Name, before.Finalizers, after.GetFinalizers())
	}
	if !slices.Contains(before.Finalizers, ibjv1.TrackingFinalizer) || slices.Contains(after.GetFinalizers(), ibjv1.TrackingFinalizer) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, discarded := after.GetAnnotations()[ibjv1.DiscardedAnnotation]; discarded {
		if a.strips.Has(before.Name) {
			c.stripped.Insert(c.indexOfUID[before.UID])
		}
		return
	}
	ix, _ := jobpod.Index(before)
	if !IsFinished(a.in.job) && !c.recordedSucc.Has(before.UID) && !c.recordedFail.Has(before.UID) &&
		!(before.Status.Phase == corev1.PodFailed && c.ignores(before)) &&
		!(before.Status.Phase == corev1.PodSucceeded && c.failedIdx.Has(ix)) {
		c.errorf("removed the finalizer of pod %s (phase %s) before its result was in the status", before.Name, before.Status.Phase)
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
