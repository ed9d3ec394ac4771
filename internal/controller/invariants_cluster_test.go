package controller

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
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
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
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
	// 3 status write, 4 failure record, 5 finalizer removals), as a controller restart would:
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
