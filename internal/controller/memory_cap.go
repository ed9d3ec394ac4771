package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// memoryCapRecheckInterval is how long the LimitRanges read for a
// namespace's memory cap are taken as current: a LimitRange changed in
// that time is followed at the next read.
const memoryCapRecheckInterval = 30 * time.Second

// +kubebuilder:rbac:groups="",resources=limitranges,verbs=list

// memoryCap is what the job's namespace lets a raise after an OOM kill
// reach (jobpod.MemoryCapOf its LimitRanges), read only for a job with
// retryResources.onOOMKilled, from the API server, and remembered by
// namespace for memoryCapRecheckInterval. A read that fails leaves the
// raise uncapped: the API server then refuses a pod over the maximum, and
// the job's status says so (condition PodCreationFailed).
func (r *Reconciler) memoryCap(ctx context.Context, job *ibjv1.IndexedBatchJob) *jobpod.MemoryCap {
	if rr := job.Spec.RetryResources; rr == nil || rr.OnOOMKilled == nil {
		return nil
	}
	if v, ok := r.memoryCaps.Get(job.Namespace); ok {
		return v.(*jobpod.MemoryCap)
	}
	var list corev1.LimitRangeList
	if err := r.apiReader.List(ctx, &list, client.InNamespace(job.Namespace)); err != nil {
		log.FromContext(ctx).Error(err, "Reading the namespace's LimitRanges for the memory an OOM raise may reach")
		return nil
	}
	c := jobpod.MemoryCapOf(list.Items)
	r.memoryCaps.Set(job.Namespace, c, memoryCapRecheckInterval)
	return c
}
