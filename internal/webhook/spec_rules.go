package webhook

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// specErrors are the rules of a job's spec that the CRD's schema cannot
// state (or cannot afford to): the keys the operator reserves on its pods,
// the success policy's counts against its index sets, the template's
// memory against retryResources.onOOMKilled.maxMemory, what retry
// InPlace cannot work with (inPlaceErrors), and a Required node avoidance
// that could leave a retry with no node (nodeAvoidanceErrors).
func specErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	errs := append(reservedKeyErrors(job), successPolicyErrors(job)...)
	errs = append(errs, nodeAvoidanceErrors(job)...)
	return append(append(errs, oomMemoryErrors(job)...), inPlaceErrors(job)...)
}

// oomMemoryErrors refuses a template whose memory request or limit is above
// retryResources.onOOMKilled.maxMemory: a raise after an OOM kill caps
// memory at maxMemory, which would then lower it (and could put a request
// above its limit). A CEL rule would have to walk every container of the
// template, over the CRD's cost budget.
func oomMemoryErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	rr := job.Spec.RetryResources
	if rr == nil || rr.OnOOMKilled == nil {
		return nil
	}
	maxMemory := rr.OnOOMKilled.MaxMemory
	var errs field.ErrorList
	spec := field.NewPath("spec", "template", "spec")
	for _, list := range []struct {
		path       *field.Path
		containers []corev1.Container
	}{
		{spec.Child("initContainers"), job.Spec.Template.Spec.InitContainers},
		{spec.Child("containers"), job.Spec.Template.Spec.Containers},
	} {
		for i, c := range list.containers {
			resources := list.path.Index(i).Child("resources")
			for _, r := range []struct {
				name string
				list corev1.ResourceList
			}{{"requests", c.Resources.Requests}, {"limits", c.Resources.Limits}} {
				if q, ok := r.list[corev1.ResourceMemory]; ok && q.Cmp(maxMemory) > 0 {
					errs = append(errs, field.Invalid(resources.Child(r.name).Key(string(corev1.ResourceMemory)), q.String(),
						fmt.Sprintf("must be less than or equal to spec.retryResources.onOOMKilled.maxMemory (%s): "+
							"a raise after an OOM kill never lowers a container's memory", maxMemory.String())))
				}
			}
		}
	}
	return errs
}

// reservedKeyErrors refuses a pod template that sets a label or annotation
// the operator writes on its pods (ibjv1.ReservedPodLabels and
// ReservedPodAnnotations): a template's value would be overwritten at best,
// and at worst (the discarded annotation) have every pod let go as it
// starts.
func reservedKeyErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	var errs field.ErrorList
	meta := field.NewPath("spec", "template", "metadata")
	for _, key := range ibjv1.ReservedPodLabels {
		if _, ok := job.Spec.Template.Labels[key]; ok {
			errs = append(errs, field.Forbidden(meta.Child("labels").Key(key),
				"is reserved: the operator sets it on every pod it creates"))
		}
	}
	for _, key := range ibjv1.ReservedPodAnnotations {
		if _, ok := job.Spec.Template.Annotations[key]; ok {
			errs = append(errs, field.Forbidden(meta.Child("annotations").Key(key),
				"is reserved: the operator sets it on the pods it creates and reads it as its own record of them"))
		}
	}
	return errs
}

// successPolicyErrors refuses a success policy rule whose succeededCount
// is more than the number of indexes its succeededIndexes names: it could
// never be met. Upstream's validation refuses it with this message; the
// CRD's CEL would have to parse the index list, which is over its cost
// budget.
func successPolicyErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	policy := job.Spec.SuccessPolicy
	if policy == nil {
		return nil
	}
	var errs field.ErrorList
	rules := field.NewPath("spec", "successPolicy", "rules")
	for i, rule := range policy.Rules {
		if rule.SucceededCount == nil || rule.SucceededIndexes == nil {
			continue
		}
		set, err := indexset.Parse(*rule.SucceededIndexes, job.Spec.Completions)
		if err != nil {
			continue // the CRD's own rules refuse a malformed list
		}
		if total := set.Len(); int(*rule.SucceededCount) > total {
			errs = append(errs, field.Invalid(rules.Index(i).Child("succeededCount"), *rule.SucceededCount,
				fmt.Sprintf("must be less than or equal to %d (the number of indexes in the specified succeededIndexes field)", total)))
		}
	}
	return errs
}
