package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
)

// DefaultDryRunTimeout bounds the dry-run create of a job's first pod. It is
// half the webhook's timeoutSeconds (10 s in config/webhook), so that an API
// server slow to answer the dry-run still leaves the webhook time to allow
// the job with a warning instead of timing out under failurePolicy Fail.
const DefaultDryRunTimeout = 5 * time.Second

// placeholderUID stands for the job's UID in the dry-run pod's owner
// reference when the job has none yet; the API server checks only that the
// reference has one.
const placeholderUID types.UID = "00000000-0000-0000-0000-000000000000"

// Validator judges a job's pod template as the Pod API judges it: it asks
// the API server to create, as a dry run, the pod the controller would
// create for index 0 (podbuild.First) in the job's namespace. No pod
// validation is copied here, so the verdict is the API server's own, for its
// version and its admission chain.
type Validator struct {
	// client sends the dry-run creates. It should not share a rate limiter
	// with the controller, so that admission does not wait behind pod
	// creates at the controller's QPS limit.
	client  client.Client
	timeout time.Duration
	// Queue, when set, is a queueing system's validation of a job (the
	// Kueue integration's: Kueue's own rules for its labels and
	// annotations on a job), applied before the job's pods are judged.
	Queue QueueValidation
	// kubelets is what the nodes' kubelet versions said when last read,
	// for jobs that retry in place.
	kubelets kubelets
}

// SetKubeletsRecheck sets how long a read of the nodes' kubelet versions
// is taken as current (DefaultKubeletsRecheck when not set).
func (v *Validator) SetKubeletsRecheck(d time.Duration) { v.kubelets.recheck = d }

// QueueValidation is a queueing system's judgement of a job: the errors of
// a new job, and of an update. An error is a failure to judge (a read that
// failed), which refuses the request.
type QueueValidation interface {
	ValidateCreate(ctx context.Context, job *ibjv1.IndexedBatchJob) (field.ErrorList, error)
	ValidateUpdate(ctx context.Context, old, job *ibjv1.IndexedBatchJob) (field.ErrorList, error)
}

// NewValidator returns a Validator that dry-runs pods through c, waiting at
// most timeout for the API server's answer.
func NewValidator(c client.Client, timeout time.Duration) *Validator {
	return &Validator{client: c, timeout: timeout}
}

var _ admission.Validator[*ibjv1.IndexedBatchJob] = (*Validator)(nil)

// ValidateCreate judges the new job's pod template.
func (v *Validator) ValidateCreate(ctx context.Context, job *ibjv1.IndexedBatchJob) (admission.Warnings, error) {
	errs := specErrors(job)
	if v.Queue != nil {
		queueErrs, err := v.Queue.ValidateCreate(ctx, job)
		if err != nil {
			return nil, err
		}
		errs = append(errs, queueErrs...)
	}
	if len(errs) > 0 {
		return nil, invalid(job, errs)
	}
	warnings, err := v.judgePods(ctx, job)
	return append(append(warnings, nodeAvoidanceWarnings(job)...), schedulingWarnings(job)...), err
}

// invalid is the refusal of the job for errs.
func invalid(job *ibjv1.IndexedBatchJob, errs field.ErrorList) error {
	return apierrors.NewInvalid(ibjv1.GroupVersion.WithKind("IndexedBatchJob").GroupKind(), job.Name, errs)
}

// ValidateUpdate judges the update (validateUpdate) and warns of the
// job's deprecated fields, as a create does.
func (v *Validator) ValidateUpdate(ctx context.Context, old, job *ibjv1.IndexedBatchJob) (admission.Warnings, error) {
	warnings, err := v.validateUpdate(ctx, old, job)
	if job.DeletionTimestamp != nil {
		return warnings, err
	}
	return append(warnings, schedulingWarnings(job)...), err
}

// validateUpdate applies the queueing system's rules (Queue), then judges
// the template only when the update changes it or
// retryResources, which makes the pods' memory (what else the pod depends
// on, the job's name, namespace, network and backoffLimitPerIndex, cannot
// change). An unchanged template was judged
// when it was written; judging it again would block, for example, the
// suspend and resume of a queueing system, or the labels of a job admitted
// before the webhook was installed, and cost a dry run per update.
func (v *Validator) validateUpdate(ctx context.Context, old, job *ibjv1.IndexedBatchJob) (admission.Warnings, error) {
	if job.DeletionTimestamp != nil {
		return nil, nil
	}
	if v.Queue != nil {
		errs, err := v.Queue.ValidateUpdate(ctx, old, job)
		if err != nil {
			return nil, err
		}
		if len(errs) > 0 {
			return nil, invalid(job, errs)
		}
	}
	if !equality.Semantic.DeepEqual(old.Spec.SuccessPolicy, job.Spec.SuccessPolicy) {
		if errs := successPolicyErrors(job); len(errs) > 0 {
			return nil, invalid(job, errs)
		}
	}
	templateChanged := !equality.Semantic.DeepEqual(old.Spec.Template, job.Spec.Template)
	oomChanged := !equality.Semantic.DeepEqual(old.Spec.RetryResources, job.Spec.RetryResources)
	var avoidWarnings []string
	if templateChanged || !equality.Semantic.DeepEqual(old.Spec.NodeAvoidance, job.Spec.NodeAvoidance) {
		if errs := nodeAvoidanceErrors(job); len(errs) > 0 {
			return nil, invalid(job, errs)
		}
		avoidWarnings = nodeAvoidanceWarnings(job)
	}
	if !templateChanged && !oomChanged {
		return avoidWarnings, nil
	}
	errs := oomMemoryErrors(job)
	if templateChanged {
		errs = append(errs, append(containersChangedBeyondResources(old, job), reservedKeyErrors(job)...)...)
	}
	if len(errs) > 0 {
		return nil, invalid(job, errs)
	}
	warnings, err := v.judgePods(ctx, job)
	return append(warnings, avoidWarnings...), err
}

// containersChangedBeyondResources refuses a template update that changes
// a container in anything but its resources: the CRD lets the container
// lists of a suspended job change (for their resources), keeping the
// containers' names and order, but comparing every field of every
// container is beyond what its CEL rules may cost.
func containersChangedBeyondResources(old, job *ibjv1.IndexedBatchJob) field.ErrorList {
	var errs field.ErrorList
	spec := field.NewPath("spec", "template", "spec")
	for _, lists := range []struct {
		path     *field.Path
		old, new []corev1.Container
	}{
		{spec.Child("containers"), old.Spec.Template.Spec.Containers, job.Spec.Template.Spec.Containers},
		{spec.Child("initContainers"), old.Spec.Template.Spec.InitContainers, job.Spec.Template.Spec.InitContainers},
	} {
		if len(lists.old) != len(lists.new) {
			continue // the CRD's rule refuses it, with its message
		}
		for i := range lists.new {
			o, n := lists.old[i].DeepCopy(), lists.new[i].DeepCopy()
			o.Resources, n.Resources = corev1.ResourceRequirements{}, corev1.ResourceRequirements{}
			if !equality.Semantic.DeepEqual(o, n) {
				errs = append(errs, field.Forbidden(lists.path.Index(i),
					"a container may change only in its resources, and only while the job is suspended"))
			}
		}
	}
	return errs
}

// ValidateDelete allows every delete.
func (v *Validator) ValidateDelete(context.Context, *ibjv1.IndexedBatchJob) (admission.Warnings, error) {
	return nil, nil
}

// judgePods dry-runs the job's first pod and, for a job with
// retryResources.onOOMKilled, the pod with the most memory a raise can give
// it (podbuild.MostMemory), so that a raise after an OOM kill never
// makes a pod the API server refuses. The API server's answer decides:
//   - Invalid (422): the job is rejected with the Pod API's causes, their
//     fields under spec.template (see jobField);
//   - Forbidden (403: a full ResourceQuota, Pod Security admission, a
//     policy engine, a LimitRange's maximum): the job is admitted with a
//     warning. A quota frees up and a namespace's policy can change, and the
//     controller reports what stops the pods in the job's status (condition
//     PodCreationFailed);
//   - any other error (a timeout, an unavailable webhook of another
//     component, a webhook that does not support dry runs): the job is
//     admitted with a warning. The webhook cannot judge, and refusing every
//     job while the API server struggles would be worse than the status
//     the controller reports later.
//
// A raise stops at the namespace's LimitRange maximum, as the controller
// stops it; a warning says so when that is below maxMemory.
//
// For a job with a retry InPlace rule, a first pod that comes back without
// the container restart rules it was sent with refuses the job
// (droppedRestartRulesError), and nodes whose kubelet is older than 1.35
// are warned of (oldKubeletWarnings). A pod the admission chain changed in
// what the operator relies on refuses the job or is warned of
// (mutatedAtAdmission).
func (v *Validator) judgePods(ctx context.Context, job *ibjv1.IndexedBatchJob) (admission.Warnings, error) {
	first := podbuild.First(job, 0)
	dryRunnable(first)
	sent := first.DeepCopy()
	warnings, err := v.judgePod(ctx, job, first, "")
	if err != nil || len(warnings) > 0 {
		return warnings, err
	}
	if hasRestartRules(sent) && !hasRestartRules(first) {
		return nil, droppedRestartRulesError(job)
	}
	if warnings, err = mutatedAtAdmission(job, sent, first, ""); err != nil {
		return nil, err
	}
	warnings = append(warnings, v.oldKubeletWarnings(ctx, job)...)
	rr := job.Spec.RetryResources
	if rr == nil || rr.OnOOMKilled == nil {
		return warnings, nil
	}
	memoryCap := v.memoryCap(ctx, job.Namespace)
	if memoryCap != nil && memoryCap.Max.Cmp(rr.OnOOMKilled.MaxMemory) < 0 {
		warnings = append(warnings, fmt.Sprintf("a raise after an OOM kill stops at %s, the container maximum of LimitRange %s "+
			"in namespace %s, below spec.retryResources.onOOMKilled.maxMemory (%s)",
			memoryCap.Max.String(), memoryCap.LimitRange, job.Namespace, rr.OnOOMKilled.MaxMemory.String()))
	}
	raised := podbuild.MostMemory(job, 0, memoryCap)
	dryRunnable(raised)
	sent = raised.DeepCopy()
	more, err := v.judgePod(ctx, job, raised, raisedPodWords)
	if err != nil || len(more) > 0 {
		return append(warnings, more...), err
	}
	more, err = mutatedAtAdmission(job, sent, raised, raisedPodWords)
	return append(warnings, more...), err
}

// memoryCap is what the namespace's LimitRanges let a container have, nil
// when none sets a maximum or they cannot be read (the dry run of the
// pod with the most memory then says what the API server thinks of it).
func (v *Validator) memoryCap(ctx context.Context, namespace string) *jobpod.MemoryCap {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	var list corev1.LimitRangeList
	if err := v.client.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		log.FromContext(ctx).Info("Could not read the namespace's LimitRanges", "namespace", namespace, "error", err)
		return nil
	}
	return jobpod.MemoryCapOf(list.Items)
}

// raisedPodWords begin what the API server says of the pod with the most
// memory, so that a refusal says which pod it is about.
const raisedPodWords = "with its memory raised as far as retryResources.onOOMKilled lets it after OOM kills, "

// judgePod dry-runs one pod of the job and turns the API server's answer
// into the job's (see judgePods); about, when set, begins each message.
// The pod becomes what the API server made of it.
func (v *Validator) judgePod(ctx context.Context, job *ibjv1.IndexedBatchJob, pod *corev1.Pod, about string) (admission.Warnings, error) {
	dryRunnable(pod)
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	err := v.client.Create(ctx, pod, client.DryRunAll)
	var status apierrors.APIStatus
	switch {
	case err == nil:
		return nil, nil
	case apierrors.IsInvalid(err) && errors.As(err, &status):
		st := status.Status()
		if about != "" {
			st = aboutPod(st, about)
		}
		return nil, invalidJob(job, st)
	case apierrors.IsForbidden(err):
		return admission.Warnings{fmt.Sprintf("%sthe API server forbids this job's pods now, so none will start until that changes "+
			"(the job's condition PodCreationFailed will say so): %s", about, apiMessage(err))}, nil
	default:
		log.FromContext(ctx).Info("Admitted a job whose pod template could not be checked", "job", client.ObjectKeyFromObject(job), "error", err)
		return admission.Warnings{fmt.Sprintf("%sthe pod template was not checked (dry-run create of its first pod: %s); "+
			"if its pods are refused, the job's condition PodCreationFailed will say why", about, apiMessage(err))}, nil
	}
}

// dryRunnable makes pod one the API server can dry-run for a job it may
// not have yet: a generated name (the pod the controller made for index 0
// may exist) and placeholderUID for the job's UID. Done once: the pod
// keeps its generated name after.
func dryRunnable(pod *corev1.Pod) {
	if pod.Name == "" {
		return
	}
	pod.GenerateName, pod.Name = pod.Name+"-", ""
	for i := range pod.OwnerReferences {
		if pod.OwnerReferences[i].UID == "" {
			pod.OwnerReferences[i].UID = placeholderUID
		}
	}
	if uid, ok := pod.Labels[ibjv1.ControllerUIDLabel]; ok && uid == "" {
		pod.Labels[ibjv1.ControllerUIDLabel] = string(placeholderUID)
	}
}

// aboutPod is the API server's refusal with about before its message and
// each cause's.
func aboutPod(st metav1.Status, about string) metav1.Status {
	st.Message = about + st.Message
	if st.Details != nil {
		details := *st.Details
		details.Causes = make([]metav1.StatusCause, len(st.Details.Causes))
		for i, c := range st.Details.Causes {
			c.Message = about + c.Message
			details.Causes[i] = c
		}
		st.Details = &details
	}
	return st
}

// invalidJob is the API server's refusal of the pod, restated for the job:
// each cause keeps its message, its field moves under the job's template,
// and kubectl prints it as it prints a batch/v1 Job's:
// `The IndexedBatchJob "x" is invalid: spec.template.spec.containers[0].name: Invalid value: ...`.
func invalidJob(job *ibjv1.IndexedBatchJob, pod metav1.Status) *apierrors.StatusError {
	var causes []metav1.StatusCause
	if pod.Details != nil {
		causes = make([]metav1.StatusCause, 0, len(pod.Details.Causes))
		for _, c := range pod.Details.Causes {
			c.Field = jobField(job, c.Field)
			causes = append(causes, c)
		}
	}
	if len(causes) == 0 {
		causes = []metav1.StatusCause{{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.template", Message: pod.Message}}
	}
	parts := make([]string, len(causes))
	for i, c := range causes {
		parts[i] = c.Message
		if c.Field != "" {
			parts[i] = c.Field + ": " + c.Message
		}
	}
	msg := strings.Join(parts, ", ")
	if len(parts) > 1 {
		msg = "[" + msg + "]"
	}
	gk := ibjv1.GroupVersion.WithKind("IndexedBatchJob").GroupKind()
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusUnprocessableEntity,
		Reason: metav1.StatusReasonInvalid,
		Details: &metav1.StatusDetails{
			Group:  gk.Group,
			Kind:   gk.Kind,
			Name:   job.Name,
			Causes: causes,
		},
		Message: fmt.Sprintf("%s %q is invalid: %s", gk.String(), job.Name, msg),
	}}
}

// jobField is where a field of the pod comes from in the job: the pod's
// spec and metadata are the template's (spec.template.spec.containers[0].name),
// its name is made from the job's. The controller puts JOB_COMPLETION_INDEX
// first in every container's env, so an env entry's index is the
// template's (see templateEnvIndex).
func jobField(job *ibjv1.IndexedBatchJob, podField string) string {
	switch {
	case podField == "metadata.name" || podField == "metadata.generateName":
		return "metadata.name"
	case podField == "spec" || podField == "metadata":
		return "spec.template." + podField
	case strings.HasPrefix(podField, "metadata."):
		return "spec.template." + podField
	case strings.HasPrefix(podField, "spec."):
		if m := envField.FindStringSubmatch(podField); m != nil {
			if ix, ok := templateEnvIndex(job, m[1], atoi(m[2]), atoi(m[3])); ok {
				return fmt.Sprintf("spec.template.spec.%s[%s].env[%d]%s", m[1], m[2], ix, m[4])
			}
		}
		return "spec.template." + podField
	default:
		return podField
	}
}

// envField matches an env entry's field path in a pod: the container list,
// the container's index, the entry's index, the rest.
var envField = regexp.MustCompile(`^spec\.(containers|initContainers)\[(\d+)\]\.env\[(\d+)\](.*)$`)

// templateEnvIndex maps the index of an env entry of the pod's container
// to the template's: the pod's env is JOB_COMPLETION_INDEX followed by the
// template's entries without any of that name.
func templateEnvIndex(job *ibjv1.IndexedBatchJob, list string, container, podIndex int) (int, bool) {
	containers := job.Spec.Template.Spec.Containers
	if list == "initContainers" {
		containers = job.Spec.Template.Spec.InitContainers
	}
	if podIndex < 1 || container >= len(containers) {
		return 0, false
	}
	n := 0
	for i, e := range containers[container].Env {
		if e.Name == ibjv1.CompletionIndexEnvName {
			continue
		}
		n++
		if n == podIndex {
			return i, true
		}
	}
	return 0, false
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// apiMessage is the API server's message of an error, or the error itself.
func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}
