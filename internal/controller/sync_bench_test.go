package controller

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// BenchmarkSyncLargeJob is one sync of a job of 100,000 indexes halfway
// through, at parallelism 1,000: 50,000 indexes completed and recorded,
// 30,000 of their pods still waiting for their finalizer to go (the
// client releases them when it has time), 1,000 pods running, 100 just
// succeeded. The size dependence of a sync shows here (go test -bench
// SyncLargeJob ./internal/controller), before it shows in make bench:
// "listed" lists every pod, as the first sync of the job in a process
// does; "settled" lists only the 1,000 of the running indexes: the pod
// cache keeps the completed indexes' pods out of the job's later syncs,
// those whose finalizer the background still has to remove too.
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
	listed := syncInput{job: job, pods: pods, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true}
	settled := listed
	settled.pods = slices.DeleteFunc(slices.Clone(pods), func(p *jobpod.Pod) bool { return p.Index < done })
	settled.settled, settled.settledSuccess = indexset.Range(0, done-1), testNow.Add(-time.Minute)
	for _, in := range []struct {
		name string
		in   syncInput
	}{{"listed", listed}, {"settled", settled}} {
		b.Run(in.name, func(b *testing.B) {
			if p := syncJob(in.in); len(p.create) != fresh || p.status.Succeeded != done+fresh || p.needAllPods {
				b.Fatalf("created %d pods, %d succeeded, needs all pods %v; want %d, %d, false", len(p.create), p.status.Succeeded, p.needAllPods, fresh, done+fresh)
			}
			b.ReportAllocs()
			for b.Loop() {
				syncJob(in.in)
			}
		})
	}
}
