package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
// comes back as asked for forgets the wait.
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
	if got := r.jobs.mutatedUntil(job); !got.Equal(testNow.Add(10 * time.Second)) {
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
	if got := r.jobs.mutatedUntil(job); !got.IsZero() {
		t.Errorf("after a create as asked for, creates still wait until %v", got)
	}
	if err := api.List(context.Background(), &pods); err != nil || len(pods.Items) != 1 {
		t.Errorf("pods: %d (%v), want the one created", len(pods.Items), err)
	}
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
