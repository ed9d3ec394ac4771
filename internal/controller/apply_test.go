package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// A pod deleted uncounted is reported as soon as it is gone, even when the
// status write of the same sync fails: the next sync no longer sees it.
func TestApplyReportsADeletedPodWhenTheStatusWriteFails(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-abc", Namespace: "ns"}}
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job, stray).WithStatusSubresource(job).Build()
	c := interceptor.NewClient(api, interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return apierrors.NewConflict(schema.GroupResource{Group: ibjv1.GroupVersion.Group, Resource: "indexedbatchjobs"}, "a", nil)
		},
	})
	recorder := events.NewFakeRecorder(10)
	r := NewReconciler(c, recorder, clock.RealClock{}, jobpod.DefaultBackoff)

	pod := &jobpod.Pod{}
	pod.Name, pod.Namespace = stray.Name, stray.Namespace
	status := *job.Status.DeepCopy()
	status.Terminating = ptr.To[int32](1) // a change, so that the status is written
	p := plan{status: status, delete: []podDeletion{{pod: pod, stripFinalizer: true, reason: "invalid completion index",
		event: ptr.To(warningEvent("InvalidPodIndex", "Deleted pod a-abc without counting it"))}}}
	if _, err := r.apply(context.Background(), job, p); err == nil {
		t.Fatal("apply succeeded although the status write failed")
	}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(stray), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the stray pod is still there: %v", err)
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.Contains(got[0], "InvalidPodIndex") {
		t.Errorf("events %q, want the InvalidPodIndex warning", got)
	}
}

// A held status (plan.holdStatus) is not written, its pods are not queued
// for release, and the sync comes back when the hold ends; once something
// besides the counters changed, the status is written all the same.
func TestApplyHoldsAStatusThatOnlyMovesCounters(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	job.Status.StartTime, job.Status.Phase, job.Status.Active = &metav1.Time{Time: time.Now()}, ibjv1.PhaseRunning, 2
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	writes := 0
	c := interceptor.NewClient(api, interceptor.Funcs{
		SubResourceUpdate: countStatusWrites(&writes),
	})
	r := NewReconciler(c, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	succeeded := &jobpod.Pod{}
	succeeded.Name, succeeded.Namespace, succeeded.UID = "a-0-0", "ns", "pod-uid"

	status := *job.Status.DeepCopy()
	status.Succeeded, status.CompletedIndexes = 1, "0"
	held := plan{status: status, releaseLater: []*jobpod.Pod{succeeded}, holdStatus: 300 * time.Millisecond}
	res, err := r.apply(context.Background(), job, held)
	if err != nil {
		t.Fatal(err)
	}
	if writes != 0 || r.later.size() != 0 || res.RequeueAfter != 300*time.Millisecond {
		t.Errorf("held: %d status writes, %d pods queued for release, requeue after %v; want 0, 0, 300ms", writes, r.later.size(), res.RequeueAfter)
	}

	moved := held
	moved.status = *status.DeepCopy()
	moved.status.Failed = 1 // not a counter that may wait
	if _, err := r.apply(context.Background(), job, moved); err != nil {
		t.Fatal(err)
	}
	if writes != 1 || r.later.size() != 1 {
		t.Errorf("not only counters: %d status writes, %d pods queued for release; want 1 and 1", writes, r.later.size())
	}
}

// A job's first status held back (plan.holdStart) is not written, and its
// startTime is kept for the next syncs; the write that comes forgets it.
// A first status that apply finds saying more than the start (a create
// refused: condition PodCreationFailed) is written at once.
func TestApplyHoldsAJobsFirstStatusAndKeepsItsStart(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	writes := 0
	c := interceptor.NewClient(api, interceptor.Funcs{
		SubResourceUpdate: countStatusWrites(&writes),
	})
	r := NewReconciler(c, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	start := time.Now().Truncate(time.Second)
	first := *job.Status.DeepCopy()
	first.StartTime, first.Active, first.ObservedGeneration = &metav1.Time{Time: start}, 0, job.Generation
	held := plan{status: first, holdStatus: 700 * time.Millisecond, holdStart: start}
	res, err := r.apply(context.Background(), job, held)
	if err != nil {
		t.Fatal(err)
	}
	if writes != 0 || res.RequeueAfter != 700*time.Millisecond || !heldStart(r, job).Equal(start) {
		t.Errorf("held: %d status writes, requeue after %v, start kept %v; want 0, 700ms, %v", writes, res.RequeueAfter, heldStart(r, job), start)
	}

	written := held
	written.status = *first.DeepCopy()
	written.status.Failed = 1
	if _, err := r.apply(context.Background(), job, written); err != nil {
		t.Fatal(err)
	}
	if writes != 1 || !heldStart(r, job).IsZero() {
		t.Errorf("written: %d status writes, start kept %v; want 1 and none", writes, heldStart(r, job))
	}

	// A create refused in the held sync: its condition is written at once.
	refusing := interceptor.NewClient(api, interceptor.Funcs{
		Create: func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
			return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a-0-0", fmt.Errorf("exceeded quota"))
		},
		SubResourceUpdate: countStatusWrites(&writes),
	})
	job2 := harness.MakeIndexedBatchJob("b", "ns").UID("job-uid-2").Completions(2).Obj()
	if err := api.Create(context.Background(), job2); err != nil {
		t.Fatal(err)
	}
	r2 := NewReconciler(refusing, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	refused := held
	refused.create = []podbuild.Spec{{Index: 0}}
	refused.status.Active = 1
	if _, err := r2.apply(context.Background(), job2, refused); err == nil {
		t.Fatal("the refused create's error was not returned")
	}
	if writes != 2 || !heldStart(r2, job2).IsZero() {
		t.Errorf("a refused create: %d status writes in all, start kept %v; want 2 and none", writes, heldStart(r2, job2))
	}
}

// countStatusWrites is an interceptor's SubResourceUpdate that counts the
// status writes in writes and lets them through.
func countStatusWrites(writes *int) func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
	return func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
		*writes++
		return cl.SubResource(sub).Update(ctx, obj, opts...)
	}
}

// heldStart is the startTime r keeps for job's first status held back.
func heldStart(r *Reconciler, job *ibjv1.IndexedBatchJob) time.Time {
	_, start := r.jobs.statusWrites(job.UID)
	return start
}

// drainEvents closes the fake recorder and returns what it recorded.
func drainEvents(recorder *events.FakeRecorder) []string {
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	return got
}

// Creates go in batches of 1, 2, 4, ... and stop at the first batch with a
// refusal (upstream's slow start): a job whose quota is full sends a
// handful of creates per sync, not its whole parallelism, and says so in
// one event for the refused batch.
func TestCreatesStartSlowAndStopAtTheFirstRefusal(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(100).Parallelism(100).Obj()
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
	const quota = 5 // pods the quota admits
	var sent, admitted atomic.Int32
	c := interceptor.NewClient(api, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			sent.Add(1)
			if admitted.Add(1) > quota {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, obj.GetName(), errors.New("exceeded quota: compute"))
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	recorder := events.NewFakeRecorder(100)
	r := NewReconciler(c, recorder, clock.RealClock{}, jobpod.DefaultBackoff)
	creates := make([]podbuild.Spec, 100)
	for i := range creates {
		creates[i] = podbuild.Spec{Index: int32(i)}
	}
	took, _, errs := r.createPods(context.Background(), job, creates)
	created := countTaken(took)
	// Batches of 1, 2 and 4: the third has two refusals, and nothing more
	// is sent.
	if got := sent.Load(); got != 7 {
		t.Errorf("%d creates sent, want 7 (batches of 1, 2 and 4)", got)
	}
	if created != quota {
		t.Errorf("%d pods created, want %d", created, quota)
	}
	refused := 0
	for _, err := range errs {
		if err != nil {
			refused++
		}
	}
	if refused != 2 || !apierrors.IsForbidden(firstError(errs)) {
		t.Errorf("%d creates failed (first %v), want the 2 the quota refused", refused, firstError(errs))
	}
	got := drainEvents(recorder)
	if len(got) != 1 || !strings.Contains(got[0], "FailedCreate") || !strings.Contains(got[0], "and 1 more creates refused") ||
		!strings.Contains(got[0], "93 more held back") {
		t.Errorf("events %q, want one FailedCreate for the refused batch, counting the creates held back", got)
	}
}

// A refused pod create is remembered, and a job with
// retryBackoff.createRefusedDelaySeconds comes back after that delay
// instead of failing the sync (whose retry the rate limiter would start
// after 5 ms); creates that all go through forget the refusal.
func TestApplyWaitsCreateRefusedDelayAfterARefusal(t *testing.T) {
	quotaFull := func(context.Context, client.WithWatch, client.Object, ...client.CreateOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "a-0-0", errors.New("exceeded quota: compute"))
	}
	for _, tc := range []struct {
		name        string
		delay       *int32
		refuse      bool
		wantErr     bool
		wantRequeue time.Duration
		wantRefused time.Time
	}{
		{name: "refused, with a delay: the sync comes back then", delay: ptr.To[int32](30), refuse: true, wantRequeue: 30 * time.Second, wantRefused: testNow},
		{name: "refused, without a delay: the sync fails and the rate limiter retries it", refuse: true, wantErr: true, wantRefused: testNow},
		{name: "created: no refusal is remembered", delay: ptr.To[int32](30)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(1).Obj()
			job.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: tc.delay}
			api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
			funcs := interceptor.Funcs{}
			if tc.refuse {
				funcs.Create = quotaFull
			}
			r := NewReconciler(interceptor.NewClient(api, funcs), nil, clocktesting.NewFakeClock(testNow), jobpod.DefaultBackoff)
			// An earlier refusal, which a create that goes through forgets.
			r.jobs.createsRefused(job.UID, true, testNow.Add(-time.Hour))
			res, err := r.apply(context.Background(), job, plan{status: *job.Status.DeepCopy(), create: []podbuild.Spec{{Index: 0}}})
			if (err != nil) != tc.wantErr || res.RequeueAfter != tc.wantRequeue {
				t.Errorf("apply = %+v, %v; want requeue after %v, error %v", res, err, tc.wantRequeue, tc.wantErr)
			}
			if got := r.jobs.lastCreateRefused(job.UID); !got.Equal(tc.wantRefused) {
				t.Errorf("last refusal %v, want %v", got, tc.wantRefused)
			}
		})
	}
}

// A sync with many pods to create sends batches of at most r.writes; once
// it has sent that many while a job that goes before it waits for a worker
// (one that came earlier, or one that came later than the job's charged
// creates reach), it gives the worker up and the rest wait for its next
// turn. Otherwise it sends them all.
func TestCreatesGiveTheWorkerUpToAJobAhead(t *testing.T) {
	for _, tc := range []struct {
		name string
		// other is when another job came, relative to this one, and
		// waits for a worker; nil when none waits.
		other       *time.Duration
		wantSent    int32
		wantYielded bool
	}{
		// Batches of 1, 2 and 4, then the worker goes to the earlier job.
		{"an earlier job waits", ptr.To(-time.Second), 7, true},
		// At QPS 4, 4 requests are free and each further one costs 250 ms:
		// after its sync and 7 creates the job's virtual time is 1 s, past
		// the later job's arrival maxArrivalGap after its own (not the wall
		// clock's second later).
		{"a later job waits", ptr.To(time.Second), 7, true},
		// Batches of 1, 2, 4, 4, 4, 4 and 1.
		{"nobody waits", nil, 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("big", "ns").UID("job-uid").Completions(20).Parallelism(20).Obj()
			api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
			var sent atomic.Int32
			c := interceptor.NewClient(api, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					sent.Add(1)
					return cl.Create(ctx, obj, opts...)
				},
			})
			clk := clocktesting.NewFakeClock(time.Now())
			r := NewReconciler(c, nil, clk, jobpod.DefaultBackoff)
			r.writes, r.order = 4, newJobOrder(clk, 4)
			other := types.NamespacedName{Namespace: "ns", Name: "other"}
			if tc.other != nil && *tc.other < 0 {
				r.order.enqueue(other, priorityqueue.AddOpts{})
				clk.Step(-*tc.other)
			}
			r.order.seen(job)
			if tc.other != nil && *tc.other > 0 {
				clk.Step(*tc.other)
				r.order.enqueue(other, priorityqueue.AddOpts{})
			}
			creates := make([]podbuild.Spec, 20)
			for i := range creates {
				creates[i] = podbuild.Spec{Index: int32(i)}
			}
			took, yielded, errs := r.createPods(context.Background(), job, creates)
			created := countTaken(took)
			if got := sent.Load(); got != tc.wantSent || created != int(tc.wantSent) || yielded != tc.wantYielded || firstError(errs) != nil {
				t.Errorf("sent %d, created %d, yielded %v (error %v); want %d sent and created, yielded %v",
					got, created, yielded, firstError(errs), tc.wantSent, tc.wantYielded)
			}
		})
	}
}

// A create whose name is taken by a pod the job does not control (left by
// a deleted job of the same name) is not counted as the job's pod: an
// event says so and the index's next attempt is named past it. A pod of the
// same name that the job controls is its own.
func TestCreateOfATakenNameIsNotCounted(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	old := podbuild.New(harness.MakeIndexedBatchJob("a", "ns").UID("old-uid").Completions(2).Obj(), podbuild.Spec{Index: 0})
	mine := podbuild.New(job, podbuild.Spec{Index: 1})
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job, old, mine).WithStatusSubresource(job).Build()
	recorder := events.NewFakeRecorder(10)
	r := NewReconciler(api, recorder, clock.RealClock{}, jobpod.DefaultBackoff)

	took, _, errs := r.createPods(context.Background(), job, []podbuild.Spec{{Index: 0}, {Index: 1}})
	created := countTaken(took)
	if created != 1 || firstError(errs) != nil {
		t.Errorf("created %d (errors %v), want 1: the job's own pod, not the old job's", created, errs)
	}
	if floors := r.jobs.takenFloors(job.UID, nil); floors[0] != 1 || len(floors) != 1 {
		t.Errorf("taken names %v, want index 0 past attempt 0", floors)
	}
	got := drainEvents(recorder)
	if len(got) != 1 || !strings.Contains(got[0], "PodNameTaken") || !strings.Contains(got[0], "a-0-0") {
		t.Errorf("events %q, want one PodNameTaken for a-0-0", got)
	}
	// The next sync names index 0's first pod past the taken name.
	r.pods = newFixedPods()
	in := r.syncInput(job, nil, nil, true)
	p := syncJob(in)
	if len(p.create) == 0 || !equality.Semantic.DeepEqual(p.create[0], podbuild.Spec{Index: 0, Attempt: 1}) {
		t.Errorf("next creates %+v, want index 0 at attempt 1 first", p.create)
	}
}

// The writes every concurrent sync has in flight together fill at most
// writeQueueSeconds of the client's budget, whatever --kube-api-qps and
// --max-concurrent-reconciles are: at kube-controller-manager's QPS 20 with
// 10 workers, a request waits at most 1 s for the rate limiter, not the
// 32 s of 64 writes a sync.
func TestWritesPerSyncKeepTheWriteQueueShort(t *testing.T) {
	cases := []struct {
		qps   float32
		syncs int
		want  int
	}{
		{5, 10, 1},
		{5, 5, 1},
		{20, 10, 2},
		{20, 5, 4},
		{50, 5, 10},
		{200, 5, 40},
		{200, 2, 64},
		{1000, 1, 64},
		{0.1, 1, 1},
		{0, 5, 64}, // no QPS stated: the client's own bound
	}
	for _, tc := range cases {
		got := writesPerSync(tc.qps, tc.syncs)
		if got != tc.want {
			t.Errorf("writesPerSync(%v, %d) = %d, want %d", tc.qps, tc.syncs, got, tc.want)
		}
		if tc.qps > 0 && got > 1 && float64(got*tc.syncs)/float64(tc.qps) > writeQueueSeconds {
			t.Errorf("qps %v, %d syncs: %d writes each queue %.1f s, over %d s", tc.qps, tc.syncs, got, float64(got*tc.syncs)/float64(tc.qps), writeQueueSeconds)
		}
	}
}
