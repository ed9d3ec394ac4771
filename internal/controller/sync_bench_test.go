package controller

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// BenchmarkSyncLargeJob is one sync of a job of 100,000 indexes halfway
// through, at parallelism 1,000: 50,000 indexes completed and recorded,
// 30,000 of their pods still waiting for their finalizer to go (the
// client releases them when it has time), 1,000 pods running, 100 just
// succeeded. The size dependence of a sync shows here (go test -bench
// SyncLargeJob ./internal/controller), before it shows in make bench.
func BenchmarkSyncLargeJob(b *testing.B) {
	const indexes, done, held, running, fresh = 100000, 50000, 30000, 1000, 100
	job := harness.MakeIndexedBatchJob("big", "ns").UID("job").Completions(indexes).Parallelism(running).Obj()
	job.Status.CompletedIndexes = fmt.Sprintf("0-%d", done-1)
	job.Status.Succeeded = done
	job.Status.Active = running
	job.Status.StartTime = ptr.To(job.CreationTimestamp)
	pods := make([]*jobpod.Pod, 0, done+running+fresh)
	for ix := int32(0); ix < done; ix++ {
		p := makePod(job, ix).succeededAt(testNow.Add(-time.Minute))
		if ix >= held {
			p = p.withoutFinalizer()
		}
		pods = append(pods, p.obj())
	}
	for ix := int32(done); ix < done+running; ix++ {
		p := makePod(job, ix).running()
		if ix < done+fresh {
			p = makePod(job, ix).succeededAt(testNow.Add(-time.Second))
		}
		pods = append(pods, p.obj())
	}
	// The cache lists in no order.
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
	in := syncInput{job: job, pods: pods, now: testNow, backoff: DefaultBackoff, expectationsSatisfied: true}
	if p := syncJob(in); len(p.create) != fresh || p.status.Succeeded != done+fresh {
		b.Fatalf("created %d pods, %d succeeded; want %d and %d", len(p.create), p.status.Succeeded, fresh, done+fresh)
	}
	b.ReportAllocs()
	for b.Loop() {
		syncJob(in)
	}
}
