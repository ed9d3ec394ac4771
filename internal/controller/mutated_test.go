package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// The wait after mutated creates: 10 s doubling to a minute; a job's
// createRefusedDelaySeconds, but never so short that the job creates more
// than parallelism+2 pods in a minute.
func TestMutatedDelay(t *testing.T) {
	job := func(parallelism int32, delay *int32) *ibjv1.IndexedBatchJob {
		j := harness.MakeIndexedBatchJob("a", "ns").Completions(100).Parallelism(parallelism).Obj()
		j.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: delay}
		return j
	}
	for _, tc := range []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		n    int32
		want time.Duration
	}{
		{"first", job(4, nil), 1, 10 * time.Second},
		{"second in a row", job(4, nil), 2, 20 * time.Second},
		{"third", job(4, nil), 3, 40 * time.Second},
		{"at most a minute", job(4, nil), 9, time.Minute},
		{"the job's delay", job(2, ptr.To[int32](30)), 1, 30 * time.Second},
		{"a short delay of a small job is raised", job(2, ptr.To[int32](1)), 1, 21 * time.Second},
		{"a wide job keeps its short delay", job(500, ptr.To[int32](1)), 1, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := mutatedDelay(tc.job, tc.n)
			if got != tc.want {
				t.Errorf("mutatedDelay = %v, want %v", got, tc.want)
			}
			// A steady wait (the job's delay) gives a create at 0, got,
			// 2*got, ... within a minute; 10 s doubling gives 0, 10, 30 s.
			if p := ptr.Deref(tc.job.Spec.Parallelism, 1); tc.job.Spec.RetryBackoff.CreateRefusedDelaySeconds != nil && int32(time.Minute/got)+1 > p+2 {
				t.Errorf("a wait of %v allows %d creates a minute, more than parallelism %d + 2", got, int32(time.Minute/got)+1, p)
			}
		})
	}
}

// A create whose answer lost the job-name label: the pod is deleted, its
// finalizers first, never counted; the slow start stops at it; the job
// waits mutatedDelay and says why once, naming the field. A create that
// comes back as asked for ends the wait; the job is paced until a minute
// passes without a mutated create.
func TestACreateThatComesBackMutatedIsDiscarded(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(4).Parallelism(4).Obj()
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
	var strip atomic.Bool
	strip.Store(true)
	var sent atomic.Int32
	c := interceptor.NewClient(api, interceptor.Funcs{
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if pod, ok := obj.(*corev1.Pod); ok {
				sent.Add(1)
				if strip.Load() {
					delete(pod.Labels, ibjv1.JobNameLabel)
				}
			}
			return cl.Create(ctx, obj, opts...)
		},
	})
	recorder := events.NewFakeRecorder(10)
	clk := clocktesting.NewFakeClock(testNow)
	r := NewReconciler(c, recorder, clk, jobpod.DefaultBackoff)
	creates := []podbuild.Spec{{Index: 0}, {Index: 1}, {Index: 2}, {Index: 3}}
	res, err := r.apply(context.Background(), job, plan{status: *job.Status.DeepCopy(), create: creates})
	if err != nil {
		t.Fatalf("apply: %v (a mutated create is no error to retry at once)", err)
	}
	if sent.Load() != 1 || res.RequeueAfter != 10*time.Second {
		t.Errorf("%d creates sent, requeue after %v; want 1 (the slow start stops at it) and 10s", sent.Load(), res.RequeueAfter)
	}
	if got := r.jobs.mutatedUntil(job, clk.Now()); !got.Equal(testNow.Add(10 * time.Second)) {
		t.Errorf("creates wait until %v, want %v", got, testNow.Add(10*time.Second))
	}
	var pods corev1.PodList
	if err := api.List(context.Background(), &pods); err != nil || len(pods.Items) != 0 {
		t.Errorf("pods left: %d (%v), want the mutated one deleted", len(pods.Items), err)
	}
	var said []string
	for len(recorder.Events) > 0 {
		said = append(said, <-recorder.Events)
	}
	if len(said) != 1 || !strings.Contains(said[0], ibjv1.ReasonPodMutated) ||
		!strings.Contains(said[0], "metadata.labels["+ibjv1.JobNameLabel+"] was removed") {
		t.Errorf("events %q, want one PodMutated naming the label", said)
	}

	// Fixed: the next create comes back as asked for and the wait is gone.
	strip.Store(false)
	clk.Step(10 * time.Second)
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apply(context.Background(), job, plan{status: *job.Status.DeepCopy(), create: creates[:1]}); err != nil {
		t.Fatal(err)
	}
	// Paced for a minute after the mutated create: one pod every
	// mutatedFloor (13 s for parallelism 4), not the slow start.
	if got, want := r.jobs.mutatedUntil(job, clk.Now()), clk.Now().Add(13*time.Second); !got.Equal(want) {
		t.Errorf("after a create as asked for, creates wait until %v, want %v", got, want)
	}
	// The condition stays for that minute: an operator started now paces
	// the job from it.
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	if !podMutatedCondition(&job.Status) {
		t.Errorf("conditions %v: want PodMutated to stay within a minute of the mutated create", job.Status.Conditions)
	}
	if got := newJobStates().mutatedUntil(job, clk.Now()); got.IsZero() {
		t.Error("an operator started within the minute does not pace the job")
	}
	clk.Step(time.Minute)
	if got := r.jobs.mutatedUntil(job, clk.Now()); !got.IsZero() {
		t.Errorf("a minute after the last mutated create, creates still wait until %v", got)
	}
	// The sync at the minute's end, creating nothing, clears the condition.
	if _, err := r.apply(context.Background(), job, plan{status: *job.Status.DeepCopy()}); err != nil {
		t.Fatal(err)
	}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	if podMutatedCondition(&job.Status) {
		t.Errorf("conditions %v: want PodMutated gone a minute after the last mutated create", job.Status.Conditions)
	}
	if err := api.List(context.Background(), &pods); err != nil || len(pods.Items) != 1 {
		t.Errorf("pods: %d (%v), want the one created", len(pods.Items), err)
	}
}

// Within a minute of a mutated create the job creates one pod a sync,
// mutatedFloor apart when creates come back as asked for, so that a policy
// that rewrites only some creates cannot make it create more than
// parallelism+2 pods in a minute; a restarted operator paces a job whose
// status says its creates come back mutated.
func TestPacedAfterAMutatedCreate(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(100).Parallelism(40).Obj()
	job.Spec.RetryBackoff = &ibjv1.RetryBackoff{CreateRefusedDelaySeconds: ptr.To[int32](1)}
	floor := mutatedFloor(job) // 2 s
	s := newJobStates()
	s.createsMutated(job.UID, true, testNow)
	if got, want := s.mutatedUntil(job, testNow), testNow.Add(floor); !got.Equal(want) {
		t.Errorf("after a mutated create: until %v, want %v", got, want)
	}
	s.createsMutated(job.UID, false, testNow.Add(5*time.Second))
	if got, want := s.mutatedUntil(job, testNow.Add(5*time.Second)), testNow.Add(5*time.Second+floor); !got.Equal(want) {
		t.Errorf("after a create as asked for: until %v, want %v", got, want)
	}
	if got := s.mutatedUntil(job, testNow.Add(time.Minute)); !got.IsZero() {
		t.Errorf("a minute after the mutated create: until %v, want none", got)
	}

	// One pod a sync while paced, though 40 are wanted.
	in := syncInput{job: job, now: testNow.Add(10 * time.Second), backoff: jobpod.DefaultBackoff, expectationsSatisfied: true,
		mutatedUntil: testNow.Add(7 * time.Second)}
	if p := syncJob(in); len(p.create) != 1 || p.requeueAfter != floor {
		t.Errorf("paced sync creates %d pods, requeue %v; want 1 and %v", len(p.create), p.requeueAfter, floor)
	}
	in.mutatedUntil = time.Time{}
	if p := syncJob(in); len(p.create) != 40 {
		t.Errorf("unpaced sync creates %d pods, want 40", len(p.create))
	}

	// Syncs every 100 ms for five minutes, every tenth create mutated:
	// never more than parallelism+2 creates in the minute from a mutated
	// one, with the operator
	// running throughout or restarted every 7.8 s (six kills in 47 s, as
	// the chaos spec does), each process knowing only the job's status.
	for _, restartEvery := range []time.Duration{0, 7800 * time.Millisecond} {
		job.Status = ibjv1.IndexedBatchJobStatus{}
		if n, from := mostCreatesInAMinute(job, restartEvery); n > 42 {
			t.Errorf("restarted every %v: %d creates in the minute from %v, want at most 42", restartEvery, n, from)
		}
	}

	// A restarted operator: no memory of the job, its status says its
	// creates come back mutated: paced from now, no wait.
	job.Status.Conditions = []metav1.Condition{{Type: ibjv1.ConditionPodCreationFailed, Status: metav1.ConditionTrue, Reason: ibjv1.ReasonPodMutated}}
	if got := newJobStates().mutatedUntil(job, testNow); !got.Equal(testNow) {
		t.Errorf("restarted: until %v, want %v (paced, no wait)", got, testNow)
	}
}

// mostCreatesInAMinute runs a job's creates for five minutes, a sync
// every 100 ms and every tenth create coming back mutated, as apply does:
// paced, a sync creates one pod; not paced, batches of 1, 2, 4, ... up to
// its parallelism, stopping after the batch with a mutated create. The
// operator restarts every restartEvery (never if zero), keeping only the
// job's status. It returns the most creates in the minute from a mutated
// one, and when that minute began.
func mostCreatesInAMinute(job *ibjv1.IndexedBatchJob, restartEvery time.Duration) (int, time.Duration) {
	mutatedErr := &MutatedPodError{Pod: "a-0-0", Mutations: []podbuild.Mutation{{Field: "metadata.labels[x]", Change: "was removed"}}}
	s, restarted := newJobStates(), testNow
	var made []time.Time
	var mutatedAt []int
	for now := testNow; now.Before(testNow.Add(5 * time.Minute)); now = now.Add(100 * time.Millisecond) {
		if restartEvery > 0 && now.Sub(restarted) >= restartEvery {
			s, restarted = newJobStates(), now
		}
		until := s.mutatedUntil(job, now)
		if until.After(now) {
			continue
		}
		want := int(ptr.Deref(job.Spec.Parallelism, 1))
		if !until.IsZero() {
			want = 1
		}
		var failure error
		for batch, sent := 1, 0; sent < want && failure == nil; batch *= 2 {
			for range min(batch, want-sent) {
				made = append(made, now)
				if len(made)%10 == 0 {
					failure = mutatedErr
					mutatedAt = append(mutatedAt, len(made)-1)
				}
				sent++
			}
		}
		s.createsMutated(job.UID, failure != nil, now)
		setPodCreation(&job.Status, 1, now, true, s.mutatedMinuteEnds(job.UID).After(now), failure)
	}
	most, from := 0, time.Duration(0)
	for _, i := range mutatedAt {
		n := 0
		for _, at := range made[i:] {
			if at.Sub(made[i]) < time.Minute {
				n++
			}
		}
		if n > most {
			most, from = n, made[i].Sub(testNow)
		}
	}
	return most, from
}

// isMutated sees a MutatedPodError through wrapping, and nothing else.
func TestIsMutated(t *testing.T) {
	m := &MutatedPodError{Pod: "a-0-0", Mutations: []podbuild.Mutation{{Field: "metadata.finalizers", Change: "lost x"}}}
	if !isMutated(errors.Join(errors.New("other"), m)) || isMutated(errors.New("other")) {
		t.Error("isMutated misreads")
	}
	if want := "admission changed pod a-0-0 in what the operator relies on: metadata.finalizers lost x;"; !strings.HasPrefix(m.Error(), want) {
		t.Errorf("message %q, want it to begin %q", m.Error(), want)
	}
}
