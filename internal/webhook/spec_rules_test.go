package webhook

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Every key the operator reserves on its pods is refused in a pod template,
// with the field and the reason named.
func TestReservedKeysAreRefusedInThePodTemplate(t *testing.T) {
	labels := field.NewPath("spec", "template", "metadata", "labels")
	annotations := field.NewPath("spec", "template", "metadata", "annotations")
	labelReason := "is reserved: the operator sets it on every pod it creates"
	annotationReason := "is reserved: the operator sets it on the pods it creates and reads it as its own record of them"
	cases := []struct {
		key        string
		annotation bool
		want       *field.Error
	}{
		{ibjv1.CompletionIndexLabel, false, field.Forbidden(labels.Key(ibjv1.CompletionIndexLabel), labelReason)},
		{ibjv1.JobNameLabel, false, field.Forbidden(labels.Key(ibjv1.JobNameLabel), labelReason)},
		{ibjv1.ControllerUIDLabel, false, field.Forbidden(labels.Key(ibjv1.ControllerUIDLabel), labelReason)},
		{ibjv1.RestartAttemptLabel, false, field.Forbidden(labels.Key(ibjv1.RestartAttemptLabel), labelReason)},
		{ibjv1.CompletionIndexLabel, true, field.Forbidden(annotations.Key(ibjv1.CompletionIndexLabel), annotationReason)},
		{ibjv1.AttemptAnnotation, true, field.Forbidden(annotations.Key(ibjv1.AttemptAnnotation), annotationReason)},
		{ibjv1.IndexFailureCountAnnotation, true, field.Forbidden(annotations.Key(ibjv1.IndexFailureCountAnnotation), annotationReason)},
		{ibjv1.IndexIgnoredFailureCountAnnotation, true, field.Forbidden(annotations.Key(ibjv1.IndexIgnoredFailureCountAnnotation), annotationReason)},
		{ibjv1.DiscardedAnnotation, true, field.Forbidden(annotations.Key(ibjv1.DiscardedAnnotation), annotationReason)},
		{ibjv1.OOMKillsAnnotation, true, field.Forbidden(annotations.Key(ibjv1.OOMKillsAnnotation), annotationReason)},
		{ibjv1.MemoryAnnotation, true, field.Forbidden(annotations.Key(ibjv1.MemoryAnnotation), annotationReason)},
		{"team", false, nil},
		{"batch.indexedjob.dev/something-else", true, nil},
	}
	reserved := 0
	for _, tc := range cases {
		if tc.want != nil {
			reserved++
		}
		t.Run(tc.key, func(t *testing.T) {
			b := harness.MakeIndexedBatchJob("train", "ns").Completions(4)
			if tc.annotation {
				b = b.PodAnnotation(tc.key, "x")
			} else {
				b = b.PodLabel(tc.key, "x")
			}
			var want field.ErrorList
			if tc.want != nil {
				want = field.ErrorList{tc.want}
			}
			if diff := cmp.Diff(want, specErrors(b.Obj())); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
	if want := len(ibjv1.ReservedPodLabels) + len(ibjv1.ReservedPodAnnotations); reserved != want {
		t.Errorf("%d rows refuse a key, but %d keys are reserved: a reserved key has no row", reserved, want)
	}
}

// A success policy rule that asks for more succeeded indexes than its
// succeededIndexes names could never be met: refused with upstream's
// message.
func TestSucceededCountBeyondItsIndexesIsRefused(t *testing.T) {
	rule := func(indexes string, count int32) batchv1.SuccessPolicyRule {
		return batchv1.SuccessPolicyRule{SucceededIndexes: ptr.To(indexes), SucceededCount: ptr.To(count)}
	}
	path := field.NewPath("spec", "successPolicy", "rules")
	cases := []struct {
		name  string
		rules []batchv1.SuccessPolicyRule
		want  field.ErrorList
	}{
		{"count within the indexes", []batchv1.SuccessPolicyRule{rule("0-2", 3)}, nil},
		{"count beyond the indexes", []batchv1.SuccessPolicyRule{rule("0,2", 3)}, field.ErrorList{
			field.Invalid(path.Index(0).Child("succeededCount"), int32(3),
				"must be less than or equal to 2 (the number of indexes in the specified succeededIndexes field)"),
		}},
		{"the second rule", []batchv1.SuccessPolicyRule{rule("0-9", 1), rule("1-3,7", 5)}, field.ErrorList{
			field.Invalid(path.Index(1).Child("succeededCount"), int32(5),
				"must be less than or equal to 4 (the number of indexes in the specified succeededIndexes field)"),
		}},
		{"count without indexes", []batchv1.SuccessPolicyRule{{SucceededCount: ptr.To[int32](10)}}, nil},
		{"indexes without count", []batchv1.SuccessPolicyRule{{SucceededIndexes: ptr.To("1")}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("train", "ns").Completions(10).Obj()
			job.Spec.SuccessPolicy = &batchv1.SuccessPolicy{Rules: tc.rules}
			if diff := cmp.Diff(tc.want, specErrors(job)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// A template memory above retryResources.onOOMKilled.maxMemory is refused:
// a raise after an OOM kill would lower it.
func TestTemplateMemoryAboveMaxMemoryIsRefused(t *testing.T) {
	memory := func(q string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
	}
	message := "must be less than or equal to spec.retryResources.onOOMKilled.maxMemory (2Gi): a raise after an OOM kill never lowers a container's memory"
	spec := field.NewPath("spec", "template", "spec")
	cases := []struct {
		name       string
		main, init corev1.ResourceRequirements
		want       field.ErrorList
	}{
		{"memory at maxMemory", corev1.ResourceRequirements{Requests: memory("1Gi"), Limits: memory("2Gi")}, corev1.ResourceRequirements{}, nil},
		{"a limit above maxMemory", corev1.ResourceRequirements{Requests: memory("1Gi"), Limits: memory("3Gi")}, corev1.ResourceRequirements{}, field.ErrorList{
			field.Invalid(spec.Child("containers").Index(0).Child("resources", "limits").Key("memory"), "3Gi", message),
		}},
		{"an init container's request above maxMemory", corev1.ResourceRequirements{}, corev1.ResourceRequirements{Requests: memory("4Gi")}, field.ErrorList{
			field.Invalid(spec.Child("initContainers").Index(0).Child("resources", "requests").Key("memory"), "4Gi", message),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("train", "ns").Completions(2).InitContainer("setup").RetryOnOOMKilled(150, "2Gi").Obj()
			job.Spec.Template.Spec.Containers[0].Resources = tc.main
			job.Spec.Template.Spec.InitContainers[0].Resources = tc.init
			if diff := cmp.Diff(tc.want, specErrors(job)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			job.Spec.RetryResources = nil
			if errs := specErrors(job); len(errs) > 0 {
				t.Errorf("without onOOMKilled: errors %v, want none", errs)
			}
		})
	}
}
