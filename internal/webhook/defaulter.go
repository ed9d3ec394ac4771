package webhook

import (
	"context"
	"math"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Defaulter writes into a new job the defaults a CRD default cannot
// express, because they depend on another field, as upstream's
// SetDefaults_Job writes them into a batch/v1 Job: backoffLimit (6, or
// unlimited, 2147483647, with backoffLimitPerIndex) and podReplacementPolicy
// (Failed with a podFailurePolicy, TerminatingOrFailed otherwise). The
// stored job then says what the controller does, as `kubectl get job -o
// yaml` does. The controller applies the same defaults to a job stored
// without them (created where the webhook was not installed), so the
// webhook changes what a job shows, never how it runs.
//
// The mutating webhook (defaulting, webhook.go) runs it on create only:
// podReplacementPolicy is immutable, so defaulting it on the update of a job
// stored without it would fail that update.
//
// Queue, when set, is a queueing system's defaulting (the Kueue
// integration's, which creates a job Kueue manages suspended, and gives a
// job without a queue name the namespace's default LocalQueue, and hands a
// job of a MultiKueue queue to MultiKueue); it may set spec.suspend and
// spec.managedBy and add labels, and nothing else.
type Defaulter struct {
	Queue func(context.Context, *ibjv1.IndexedBatchJob) error
}

var _ admission.Defaulter[*ibjv1.IndexedBatchJob] = Defaulter{}

// Default fills backoffLimit and podReplacementPolicy when they are unset,
// then applies Queue.
func (d Defaulter) Default(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
	if job.Spec.BackoffLimit == nil {
		if job.Spec.BackoffLimitPerIndex != nil {
			job.Spec.BackoffLimit = ptr.To[int32](math.MaxInt32)
		} else {
			job.Spec.BackoffLimit = ptr.To[int32](6)
		}
	}
	if job.Spec.PodReplacementPolicy == nil {
		if job.Spec.PodFailurePolicy != nil {
			job.Spec.PodReplacementPolicy = ptr.To(batchv1.Failed)
		} else {
			job.Spec.PodReplacementPolicy = ptr.To(batchv1.TerminatingOrFailed)
		}
	}
	if d.Queue != nil {
		return d.Queue(ctx, job)
	}
	return nil
}
