package controller

import (
	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// oomMemory is what retryResources.onOOMKilled made of a pod's memory
// (podbuild.Memory), as the sync reports it.
type oomMemory struct {
	raised   bool
	heldBack []string
	capped   bool
}

// raiseMemory raises the memory of spec for an index OOM-killed oomKills
// times (podbuild.RaiseMemory).
func raiseMemory(job *ibjv1.IndexedBatchJob, spec *corev1.PodSpec, oomKills int32, memoryCap *jobpod.MemoryCap) oomMemory {
	m := podbuild.RaiseMemory(job, spec, oomKills, memoryCap)
	return oomMemory{raised: m.Raised, heldBack: m.HeldBack, capped: m.Capped}
}

// memoryRecord is the MemoryAnnotation of a pod with spec
// (podbuild.MemoryRecord).
func memoryRecord(spec *corev1.PodSpec) string { return podbuild.MemoryRecord(spec) }
