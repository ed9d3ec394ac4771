package jobpod

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// ReasonOOMKilled is the reason a kubelet gives a container's termination
// when the kernel killed it for going over its memory limit.
const ReasonOOMKilled = "OOMKilled"

// OwnOOMKilled reports whether a container or init container of the
// job's template was OOM-killed in p; an injected sidecar's OOM kill
// raises nothing (OwnExits).
func OwnOOMKilled(job *ibjv1.IndexedBatchJob, p *Pod) bool {
	for _, e := range OwnExits(job, p) {
		if e.OOMKilled {
			return true
		}
	}
	return false
}

// NextOOMKills is the OOM kills the next pod of p's index carries, p being
// the index's latest pod and f how its end counts: p's own, plus one when p
// failed OOM-killed; none for a job without retryResources.onOOMKilled. A
// failure of another kind (an eviction, an application error) keeps the
// count: it says nothing of the memory the work needs, and going back to a
// size that was OOM-killed would only repeat the kill.
func NextOOMKills(job *ibjv1.IndexedBatchJob, p *Pod, f Failure) int32 {
	if job.Spec.RetryResources == nil || job.Spec.RetryResources.OnOOMKilled == nil {
		return 0
	}
	if f.Failed && OwnOOMKilled(job, p) {
		return p.OOMKills + 1
	}
	return p.OOMKills
}

// MemoryCap is the most memory a namespace's LimitRanges let a container
// have (their Container maximum), and the LimitRange that sets it: what a
// raise after an OOM kill may reach in that namespace, besides
// retryResources.onOOMKilled.maxMemory.
type MemoryCap struct {
	Max        resource.Quantity
	LimitRange string
}

// MemoryCapOf is the smallest Container maximum memory among the
// LimitRanges, nil when none sets one.
func MemoryCapOf(ranges []corev1.LimitRange) *MemoryCap {
	var out *MemoryCap
	for _, lr := range ranges {
		for _, item := range lr.Spec.Limits {
			q, ok := item.Max[corev1.ResourceMemory]
			if item.Type != corev1.LimitTypeContainer || !ok {
				continue
			}
			if out == nil || q.Cmp(out.Max) < 0 {
				out = &MemoryCap{Max: q, LimitRange: lr.Name}
			}
		}
	}
	return out
}
