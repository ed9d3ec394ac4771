package kueue

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	kueueconstants "sigs.k8s.io/kueue/pkg/constants"
	controllerconstants "sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/features"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// JudgedLabels and JudgedAnnotations are the keys of a job's labels and
// annotations whose change Validation judges on an update (with the
// parallelism of a job with MinParallelismAnnotation): the validating
// webhook's matchConditions (internal/webhook) send it exactly the updates
// that change one of them, or the template.
var (
	JudgedLabels = []string{
		controllerconstants.QueueLabel, controllerconstants.WorkloadPriorityClassLabel,
		controllerconstants.MaxExecTimeSecondsLabel, controllerconstants.PrebuiltWorkloadLabel,
	}
	JudgedAnnotations = []string{
		MinParallelismAnnotation, controllerconstants.PrebuiltWorkloadAnnotation,
		kueueconstants.ElasticJobAnnotation, kueueconstants.AdmissionGatedByAnnotation,
	}
)

var (
	minParallelismPath = field.NewPath("metadata", "annotations").Key(MinParallelismAnnotation)
	parallelismPath    = field.NewPath("spec", "parallelism")
	templateMetaPath   = field.NewPath("spec", "template", "metadata")
)

// Validation is the part of Kueue's batch/v1 Job webhook that the
// operator's validating webhook applies to IndexedBatchJobs (Integration.
// Validator), so that a job is refused for what Kueue would refuse in a
// Job. Like Kueue's Job webhook it judges every job, queued or not: its
// rules are about Kueue's own labels and annotations, and bite only where a
// job carries them.
type Validation struct {
	i      *Integration
	client client.Client
}

// Validator returns Kueue's job validations for the operator's validating
// webhook to apply, while the integration is Active (before then, a queue
// name means nothing to the operator). c reads whether a namespace has a
// LocalQueue named "default".
func (i *Integration) Validator(c client.Client) Validation {
	return Validation{i: i, client: c}
}

// ValidateCreate is Kueue's validation of a new job.
func (v Validation) ValidateCreate(_ context.Context, job *ibjv1.IndexedBatchJob) (field.ErrorList, error) {
	if !v.i.Active() {
		return nil, nil
	}
	return validateCreate((*Job)(job)), nil
}

// ValidateUpdate is Kueue's validation of an update of a job; it reads the
// LocalQueue "default" of the job's namespace only when the update removes
// the job's queue name.
func (v Validation) ValidateUpdate(ctx context.Context, old, job *ibjv1.IndexedBatchJob) (field.ErrorList, error) {
	if !v.i.Active() {
		return nil, nil
	}
	var readErr error
	defaultQueueExists := func(namespace string) bool {
		ok, err := defaultLocalQueueExists(ctx, v.client, namespace)
		readErr = err
		return ok
	}
	errs := validateUpdate((*Job)(old), (*Job)(job), defaultQueueExists)
	if readErr != nil {
		return nil, readErr
	}
	return errs, nil
}

// validateCreate is what Kueue's Job webhook checks of a new job:
// jobframework's rules for every job (the queue name label is a valid
// name; a prebuilt workload's name is a valid name; elastic jobs, which
// Kueue supports for none of the external frameworks, are refused; the
// kueue.x-k8s.io/max-exec-time-seconds label is a positive integer; the
// kueue.x-k8s.io/admission-gated-by annotation is well formed), the
// min-parallelism annotation, and, while Kueue's TopologyAwareScheduling
// gate is on, the template's topology annotations.
func validateCreate(job *Job) field.ErrorList {
	errs := prebuiltWorkloadAllowed(job, jobframework.ValidateJobOnCreate(job))
	errs = append(errs, validateMinParallelism(job)...)
	return append(errs, validateTopologyRequest(job)...)
}

// validateUpdate is what Kueue's Job webhook checks of an update: the job
// as it would be created, the min-parallelism annotation again if the
// update changes it, jobframework's update rules (the queue name does not
// change while the job runs, nor is removed in a namespace with a
// LocalQueue "default"; the workload priority class label is not added to
// a running job nor removed; the max-exec-time label does not change
// unless the job stays suspended; the prebuilt workload does not change
// while the job runs; the elastic-job annotation and the admission gates
// as Kueue allows), and the parallelism of a running job that allows
// partial admission, which Kueue set when it admitted it.
func validateUpdate(old, job *Job, defaultQueueExists func(string) bool) field.ErrorList {
	errs := prebuiltWorkloadAllowed(job, jobframework.ValidateJobOnCreate(job))
	if job.Annotations[MinParallelismAnnotation] != old.Annotations[MinParallelismAnnotation] {
		errs = append(errs, validateMinParallelism(job)...)
	}
	errs = append(errs, jobframework.ValidateJobOnUpdate(old, job, defaultQueueExists)...)
	errs = append(errs, validatePartialAdmissionUpdate(old, job)...)
	return append(errs, validateTopologyRequest(job)...)
}

// validateMinParallelism checks the kueue.x-k8s.io/job-min-parallelism
// annotation: an integer from 1 to one less than the pods the job runs at
// once (equal would be full admission). The integration reads an
// unreadable value as no partial admission; refused here, it never gets
// that far.
func validateMinParallelism(job *Job) field.ErrorList {
	v, found := job.Annotations[MinParallelismAnnotation]
	if !found {
		return nil
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return field.ErrorList{field.Invalid(minParallelismPath, v, "must be an integer")}
	}
	if pods := job.podsCount(); n < 1 || int32(n) >= pods {
		return field.ErrorList{field.Invalid(minParallelismPath, v,
			fmt.Sprintf("must be from 1 to %d, less than the %d pods the job runs at once (min(parallelism, indexes))", pods-1, pods))}
	}
	return nil
}

// validatePartialAdmissionUpdate refuses a change of the parallelism of a
// running job that allows partial admission: Kueue admitted that
// parallelism, and its quota holds no more.
func validatePartialAdmissionUpdate(old, job *Job) field.ErrorList {
	if _, found := old.Annotations[MinParallelismAnnotation]; !found || ptr.Deref(old.Spec.Suspend, false) {
		return nil
	}
	if ptr.Deref(old.Spec.Parallelism, 1) != ptr.Deref(job.Spec.Parallelism, 1) {
		return field.ErrorList{field.Forbidden(parallelismPath,
			"cannot change while the job runs with partial admission (annotation "+MinParallelismAnnotation+"): "+
				"Kueue admitted this parallelism")}
	}
	return nil
}

// validateTopologyRequest checks the template's kueue.x-k8s.io/podset-*
// topology annotations as Kueue checks a Job's, while Kueue's
// TopologyAwareScheduling gate is on: at most one of required, preferred
// and unconstrained; each a valid label name (unconstrained a boolean); a
// slice size with a slice topology, a positive integer no greater than the
// pods the job runs at once.
func validateTopologyRequest(job *Job) field.ErrorList {
	if !features.Enabled(features.TopologyAwareScheduling) {
		return nil
	}
	if errs := jobframework.ValidateTASPodSetRequest(templateMetaPath, &job.Spec.Template.ObjectMeta); len(errs) > 0 {
		return errs
	}
	return jobframework.ValidateSliceSizeAnnotationUpperBound(templateMetaPath, &job.Spec.Template.ObjectMeta,
		&kueuev1beta2.PodSet{Name: kueuev1beta2.DefaultPodSetName, Count: job.podsCount()})
}

// prebuiltWorkloadAllowed drops from errs jobframework's refusal of a
// prebuilt workload, which it makes for every kind Kueue's own webhooks do
// not list: MultiKueue creates the worker's copy of a job it dispatches
// naming the Workload it made there, and the integration's reconciler runs
// it with that Workload (test/multikueue). The check that the name is a
// valid one stays.
func prebuiltWorkloadAllowed(job *Job, errs field.ErrorList) field.ErrorList {
	if jobframework.PrebuiltWorkloadNameFor(job.Object()) == "" {
		return errs
	}
	path := jobframework.GetPrebuiltWorkloadPath(job.Object()).String()
	errs = slices.DeleteFunc(errs, func(e *field.Error) bool {
		return e.Type == field.ErrorTypeForbidden && e.Field == path
	})
	if len(errs) == 0 {
		return nil
	}
	return errs
}
