package controller

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// podToCreate is one pod the decision core asks the reconciler to create.
type podToCreate struct {
	index    int32
	attempt  int32
	failures int32 // earlier failures of the index that counted
	ignored  int32 // earlier failures of the index an Ignore rule matched
	oomKills int32 // earlier pods of the index OOM-killed (retryResources.onOOMKilled)
	// generation is status.restarts when the pod is created.
	generation int32
	// memoryCap is what the namespace's LimitRanges let a raise reach,
	// nil when they set no maximum.
	memoryCap *jobpod.MemoryCap
}

// spec is the pod to build (podbuild).
func (p podToCreate) spec() podbuild.Spec {
	return podbuild.Spec{Index: p.index, Attempt: p.attempt, Failures: p.failures, Ignored: p.ignored, OOMKills: p.oomKills, MemoryCap: p.memoryCap, Generation: p.generation}
}

// podName is the pod's deterministic name (podbuild.Name).
func podName(job *ibjv1.IndexedBatchJob, index, attempt int32) string {
	return podbuild.Name(job, index, attempt)
}

// newPod builds the pod to create (podbuild.New).
func newPod(job *ibjv1.IndexedBatchJob, p podToCreate) *corev1.Pod {
	return podbuild.New(job, p.spec())
}

// controllerRef makes the job the controller of a pod or Service it
// creates (podbuild.ControllerRef).
func controllerRef(job *ibjv1.IndexedBatchJob) metav1.OwnerReference {
	return podbuild.ControllerRef(job)
}
