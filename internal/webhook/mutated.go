package webhook

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// A mutating webhook or MutatingAdmissionPolicy of the cluster may change
// the job's pods on their way in. The dry run of the job's first pod goes
// through the same chain, so what it does to that pod it does to the
// job's pods: mutatedAtAdmission compares the pod sent with the answer
// (podbuild.Mutations, as the controller compares each create's answer).
//
// A change to what every pod of the job carries alike (the job-name and
// controller-uid labels, the tracking finalizer, the controller reference,
// the container restart rules and memory the operator writes, the gang's
// scheduling group) refuses the job: its pods would each be deleted at
// create and it would never run. A change to what differs from pod to pod
// (the index, the attempt, the failure counts, the restart generation)
// may hang on the value the dry-run pod had, so it is warned of: the
// controller still deletes each pod that comes back changed, and the job's
// condition PodCreationFailed, reason PodMutated, names the field.

// perPodKeys are the labels and annotations whose value differs between
// the job's pods.
var perPodKeys = []string{
	ibjv1.CompletionIndexLabel, ibjv1.RestartAttemptLabel, ibjv1.AttemptAnnotation,
	ibjv1.IndexFailureCountAnnotation, ibjv1.IndexIgnoredFailureCountAnnotation,
	ibjv1.OOMKillsAnnotation, ibjv1.MemoryAnnotation,
}

// mutatedAtAdmission judges what the admission chain made of a dry-run pod
// (got) of job, sent as sent; about, when set, begins each message.
func mutatedAtAdmission(job *ibjv1.IndexedBatchJob, sent, got *corev1.Pod, about string) (admission.Warnings, error) {
	var errs field.ErrorList
	var warnings admission.Warnings
	for _, m := range podbuild.Mutations(sent, got, true) {
		if perPod(m.Field) {
			warnings = append(warnings, fmt.Sprintf("%sthe cluster's admission chain changed this job's dry-run pod: %s %s; "+
				"it may do so only for some pods, each of which the controller deletes at create (condition PodCreationFailed, reason PodMutated)",
				about, m.Field, m.Change))
			continue
		}
		errs = append(errs, field.Forbidden(field.NewPath(jobField(job, m.Field)),
			fmt.Sprintf("%s%s in this job's dry-run pod, changed by the cluster's admission chain (a mutating webhook or MutatingAdmissionPolicy); "+
				"the operator relies on it to find and count the job's pods, so each pod would be deleted at create and the job would never run: "+
				"exempt this job's pods from that mutation", about, m.Change)))
	}
	if len(errs) > 0 {
		return nil, invalid(job, errs)
	}
	return warnings, nil
}

// perPod: the field is a label or annotation whose value differs between
// the job's pods.
func perPod(f string) bool {
	return slices.ContainsFunc(perPodKeys, func(key string) bool { return strings.HasSuffix(f, "["+key+"]") })
}
