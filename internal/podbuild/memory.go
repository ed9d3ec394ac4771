package podbuild

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// mebibyte is the step raised memory is rounded up to, so that a pod's
// memory reads as the user would write it (1536Mi, not 1610612736).
const mebibyte = 1 << 20

// Memory is what retryResources.onOOMKilled made of a pod's memory.
type Memory struct {
	// raised: some container got more memory than the template's.
	Raised bool
	// heldBack names the containers whose memory request stayed below its
	// raised value because the job's queue admitted only the template's.
	HeldBack []string
	// capped: a raise stopped at the namespace's LimitRange maximum, below
	// maxMemory.
	Capped bool
}

// RaiseMemory raises the memory of spec's containers and init containers
// for an index OOM-killed oomKills times: each memory request and limit is
// multiplied by factorPercent/100 that many times (rounded up to a whole
// Mi each time), and capped at maxMemory. A container with neither a memory
// request nor a limit keeps none: it already may use what its node has.
// Requests and limits grow by the same steps under the same cap, so a limit
// stays at least its request. A job labelled with a Kueue queue keeps each
// request at the template's (its request, or its limit where it has no
// request: what the API server defaults the request to and what Kueue
// admitted), since a larger one would run outside the quota Kueue admitted;
// limits, which Kueue does not admit, still grow. Nothing grows past the
// namespace's LimitRange maximum (memoryCap, when lower than maxMemory): a
// pod above it would be refused, and the index would never run again.
func RaiseMemory(job *ibjv1.IndexedBatchJob, spec *corev1.PodSpec, oomKills int32, memoryCap *jobpod.MemoryCap) Memory {
	var out Memory
	rr := job.Spec.RetryResources
	if oomKills <= 0 || rr == nil || rr.OnOOMKilled == nil {
		return out
	}
	maxMemory := rr.OnOOMKilled.MaxMemory
	if memoryCap != nil && memoryCap.Max.Cmp(maxMemory) < 0 {
		maxMemory = memoryCap.Max
	}
	raise := func(q resource.Quantity) resource.Quantity {
		raised := raisedQuantity(q, maxMemory, rr.OnOOMKilled.FactorPercent, oomKills)
		if memoryCap != nil && raised.Cmp(memoryCap.Max) == 0 && raised.Cmp(rr.OnOOMKilled.MaxMemory) < 0 {
			out.Capped = true
		}
		return raised
	}
	_, queued := job.Labels[ibjv1.QueueNameLabel]
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for i := range list {
			c := &list[i]
			req, hasReq := c.Resources.Requests[corev1.ResourceMemory]
			limit, hasLimit := c.Resources.Limits[corev1.ResourceMemory]
			if !hasReq && !hasLimit {
				continue
			}
			if hasLimit {
				raised := raise(limit)
				out.Raised = out.Raised || raised.Cmp(limit) > 0
				c.Resources.Limits[corev1.ResourceMemory] = raised
			}
			admitted := req
			if !hasReq {
				admitted = limit
			}
			want := raise(admitted)
			switch {
			case queued && want.Cmp(admitted) > 0:
				out.HeldBack = append(out.HeldBack, c.Name)
				want = admitted
			case !hasReq:
				continue // the API server defaults the request to the raised limit
			}
			out.Raised = out.Raised || want.Cmp(req) > 0
			if c.Resources.Requests == nil {
				c.Resources.Requests = corev1.ResourceList{}
			}
			c.Resources.Requests[corev1.ResourceMemory] = want
		}
	}
	return out
}

// raisedQuantity is q multiplied by factorPercent/100 times times, each
// step rounded up to a whole Mi, never above maxMemory (nor lowered to it:
// a template above maxMemory is refused at admission, or above a
// LimitRange's maximum, by the API server).
func raisedQuantity(q, maxMemory resource.Quantity, factorPercent, times int32) resource.Quantity {
	maxBytes := maxMemory.Value()
	v := q.Value()
	// Each step of a v above 0 grows it by a byte or more, by a whole Mi
	// after the first, so the loop ends at the cap.
	for range times {
		if v >= maxBytes || v == 0 {
			break
		}
		v = (v*int64(factorPercent) + 99) / 100
		v = (v + mebibyte - 1) / mebibyte * mebibyte
	}
	if v > maxBytes && q.Value() <= maxBytes {
		v = maxBytes
	}
	if v == q.Value() {
		return q
	}
	return *resource.NewQuantity(v, resource.BinarySI)
}

// MemoryRecord is the MemoryAnnotation of a pod with spec: each container's
// memory limit, or request where it has no limit, init containers first.
func MemoryRecord(spec *corev1.PodSpec) string {
	var parts []string
	for _, list := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range list {
			q, ok := c.Resources.Limits[corev1.ResourceMemory]
			if !ok {
				q, ok = c.Resources.Requests[corev1.ResourceMemory]
			}
			if ok {
				parts = append(parts, fmt.Sprintf("%s=%s", c.Name, q.String()))
			}
		}
	}
	return strings.Join(parts, ",")
}
