package controller

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/internal/serverload"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// While the API server answers slowly, a sync's creates go in batches of
// the server's window, not of r.writes: the most creates in flight at
// once follows the window.
func TestCreatesFollowTheServersWindow(t *testing.T) {
	for _, tc := range []struct {
		name       string
		slow       bool
		wantAtOnce int32
	}{
		{"a fast server: batches up to r.writes", false, 8},
		{"a slow server: the window, halved from 8 to 4 and then 2", true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(30).Parallelism(30).Obj()
			api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
			var inFlight, most atomic.Int32
			c := interceptor.NewClient(api, interceptor.Funcs{
				Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
					n := inFlight.Add(1)
					defer inFlight.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(20 * time.Millisecond)
					return cl.Create(ctx, obj, opts...)
				},
			})
			clk := clocktesting.NewFakeClock(testNow)
			r := NewReconciler(c, nil, clk, jobpod.DefaultBackoff)
			r.writes = 8
			load := serverload.New(clk, 100*time.Millisecond, 8, logr.Discard())
			r.SetServerLoad(load)
			if tc.slow {
				// Two slow answers a latency apart: 8, 4, then 2.
				load.Observe(http.StatusCreated, time.Second, nil)
				clk.Step(2 * time.Second)
				load.Observe(http.StatusCreated, time.Second, nil)
			}
			creates := make([]podbuild.Spec, 30)
			for i := range creates {
				creates[i] = podbuild.Spec{Index: int32(i)}
			}
			took, _, errs := r.createPods(context.Background(), job, creates)
			if countTaken(took) != 30 || firstError(errs) != nil {
				t.Fatalf("created %d (error %v), want 30", countTaken(took), firstError(errs))
			}
			if got := most.Load(); got != tc.wantAtOnce {
				t.Errorf("at most %d creates in flight at once, want %d", got, tc.wantAtOnce)
			}
		})
	}
}

// While the API server is busy, a status that only moved counters waits
// busyStatusInterval instead of statusCounterInterval.
func TestBusyServerHoldsCountersLonger(t *testing.T) {
	for _, tc := range []struct {
		busy bool
		want time.Duration
	}{{false, statusCounterInterval}, {true, busyStatusInterval}} {
		job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Obj()
		status := job.Status.DeepCopy()
		s := newSyncState(syncInput{job: job, now: testNow, lastStatusWrite: testNow, serverBusy: tc.busy, backoff: jobpod.DefaultBackoff})
		s.status.Succeeded = status.Succeeded + 1
		s.holdCounters()
		if s.plan.holdStatus != tc.want {
			t.Errorf("busy %v: counters held %v, want %v", tc.busy, s.plan.holdStatus, tc.want)
		}
	}
}
