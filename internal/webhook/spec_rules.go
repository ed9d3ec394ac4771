package webhook

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// specErrors are the rules of a job's spec that the CRD's schema cannot
// state (or cannot afford to): the keys the operator reserves on its pods,
// and the success policy's counts against its index sets.
func specErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	return append(reservedKeyErrors(job), successPolicyErrors(job)...)
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
