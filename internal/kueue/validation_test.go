package kueue

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Kueue's labels and annotations on a job, as its users write them.
const (
	queueLabel         = "kueue.x-k8s.io/queue-name"
	priorityClassLabel = "kueue.x-k8s.io/priority-class"
	maxExecTimeLabel   = "kueue.x-k8s.io/max-exec-time-seconds"
	prebuiltLabel      = "kueue.x-k8s.io/prebuilt-workload-name"
	elasticAnnotation  = "kueue.x-k8s.io/elastic-job"
	gatedByAnnotation  = "kueue.x-k8s.io/admission-gated-by"
)

// compareErrors compares what a rule reports: which field, how, and why.
var compareErrors = cmpopts.IgnoreFields(field.Error{}, "BadValue", "Origin", "CoveredByDeclarative", "FromImperative")

// queued is a job of four indexes run at once, queued in LocalQueue q.
func queued() *harness.JobWrapper {
	return harness.MakeIndexedBatchJob("a", "ns").Completions(4).Parallelism(4).Label(queueLabel, "q")
}

func TestKueueValidatesANewJob(t *testing.T) {
	annotations := field.NewPath("metadata", "annotations")
	labels := field.NewPath("metadata", "labels")
	templateAnnotations := field.NewPath("spec", "template", "metadata", "annotations")
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want field.ErrorList
	}{
		{name: "a queued job", job: queued().Obj()},
		{name: "a job without Kueue's labels", job: harness.MakeIndexedBatchJob("a", "ns").Obj()},
		{
			name: "a queue name that is no object name",
			job:  queued().Label(queueLabel, "Not_A_Name").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(queueLabel).String(),
				Detail: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', " +
					"and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is " +
					"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"}},
		},
		{name: "a prebuilt workload, as on a worker's copy MultiKueue made", job: queued().Label(prebuiltLabel, "wl").Obj()},
		{
			name: "a prebuilt workload that is no object name",
			job:  queued().Label(prebuiltLabel, "Not_A_Name").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(prebuiltLabel).String(), BadValue: "Not_A_Name",
				Detail: "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', " +
					"and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is " +
					"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"}},
		},
		{
			name: "an elastic job, which Kueue supports for no external framework",
			job:  queued().Annotation(elasticAnnotation, "true").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: annotations.Key(elasticAnnotation).String(),
				Detail: `elastic job is not supported for "batch.indexedjob.dev/v1alpha1, Kind=IndexedBatchJob"`}},
		},
		{name: "a positive max execution time", job: queued().Label(maxExecTimeLabel, "60").Obj()},
		{
			name: "a max execution time of zero",
			job:  queued().Label(maxExecTimeLabel, "0").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(maxExecTimeLabel).String(), Detail: "should be greater than 0"}},
		},
		{
			name: "a max execution time that is no integer",
			job:  queued().Label(maxExecTimeLabel, "1h").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(maxExecTimeLabel).String(),
				Detail: `strconv.Atoi: parsing "1h": invalid syntax`}},
		},
		{name: "admission gates", job: queued().Annotation(gatedByAnnotation, "example.com/gate").Obj()},
		{name: "partial admission down to one pod of four", job: queued().Annotation(MinParallelismAnnotation, "1").Obj()},
		{
			name: "a min parallelism equal to the pods run at once",
			job:  queued().Annotation(MinParallelismAnnotation, "4").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: minParallelismPath.String(),
				Detail: "must be from 1 to 3, less than the 4 pods the job runs at once (min(parallelism, indexes))"}},
		},
		{
			name: "a min parallelism counted against the indexes when they are fewer than parallelism",
			job:  queued().Indexes("0,1").Annotation(MinParallelismAnnotation, "2").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: minParallelismPath.String(),
				Detail: "must be from 1 to 1, less than the 2 pods the job runs at once (min(parallelism, indexes))"}},
		},
		{
			name: "a min parallelism of zero",
			job:  queued().Annotation(MinParallelismAnnotation, "0").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: minParallelismPath.String(),
				Detail: "must be from 1 to 3, less than the 4 pods the job runs at once (min(parallelism, indexes))"}},
		},
		{
			name: "a min parallelism that is no integer",
			job:  queued().Annotation(MinParallelismAnnotation, "half").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: minParallelismPath.String(), Detail: "must be an integer"}},
		},
		{name: "a required topology", job: queued().PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, "example.com/rack").Obj()},
		{
			name: "a required and a preferred topology",
			job: queued().PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, "example.com/rack").
				PodAnnotation(kueuev1beta2.PodSetPreferredTopologyAnnotation, "example.com/block").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: templateAnnotations.String(),
				Detail: `must not contain more than one topology annotation: ["kueue.x-k8s.io/podset-required-topology", ` +
					`"kueue.x-k8s.io/podset-preferred-topology", "kueue.x-k8s.io/podset-unconstrained-topology"]`}},
		},
		{
			name: "a required topology that is no label name",
			job:  queued().PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, "rack?").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: templateAnnotations.Key(kueuev1beta2.PodSetRequiredTopologyAnnotation).String(),
				Detail: "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric " +
					"character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"}},
		},
		{
			name: "an unconstrained topology that is no boolean",
			job:  queued().PodAnnotation(kueuev1beta2.PodSetUnconstrainedTopologyAnnotation, "yes").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: templateAnnotations.Key(kueuev1beta2.PodSetUnconstrainedTopologyAnnotation).String(),
				Detail: "must be a boolean value"}},
		},
		{
			name: "a slice topology without a slice size",
			job: queued().PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, "example.com/block").
				PodAnnotation(kueuev1beta2.PodSetSliceRequiredTopologyAnnotation, "example.com/rack").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: templateAnnotations.Key(kueuev1beta2.PodSetSliceSizeAnnotation).String(),
				Detail: "must be set when 'kueue.x-k8s.io/podset-slice-required-topology' is specified"}},
		},
		{
			name: "slices larger than the pods run at once",
			job: queued().PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, "example.com/block").
				PodAnnotation(kueuev1beta2.PodSetSliceRequiredTopologyAnnotation, "example.com/rack").
				PodAnnotation(kueuev1beta2.PodSetSliceSizeAnnotation, "5").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: templateAnnotations.Key(kueuev1beta2.PodSetSliceSizeAnnotation).String(),
				Detail: "must not be greater than pod set count 4"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := validateCreate((*Job)(tc.job))
			if diff := cmp.Diff(tc.want, got, compareErrors); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKueueValidatesAnUpdate(t *testing.T) {
	labels := field.NewPath("metadata", "labels")
	running := func() *harness.JobWrapper { return queued().Suspend(false) }
	suspended := func() *harness.JobWrapper { return queued().Suspend(true) }
	withoutQueue := func(w *harness.JobWrapper) *ibjv1.IndexedBatchJob {
		j := w.Obj()
		delete(j.Labels, queueLabel)
		return j
	}
	cases := []struct {
		name               string
		old, job           *ibjv1.IndexedBatchJob
		defaultQueueExists bool
		want               field.ErrorList
	}{
		{
			name: "the queue name of a suspended job changes",
			old:  suspended().Obj(), job: suspended().Label(queueLabel, "other").Obj(),
		},
		{
			name: "the queue name of a running job changes",
			old:  running().Obj(), job: running().Label(queueLabel, "other").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(queueLabel).String(), Detail: apivalidation.FieldImmutableErrorMsg}},
		},
		{
			name: "a job is resumed with another queue name",
			old:  suspended().Obj(), job: running().Label(queueLabel, "other").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(queueLabel).String(), Detail: apivalidation.FieldImmutableErrorMsg}},
		},
		{
			name: "the queue name of a job Kueue is stopping changes (suspended, its template not yet restored)",
			old:  running().Obj(),
			job:  running().Suspend(true).Annotation(stoppingAnnotation, stoppingValue).Label(queueLabel, "other").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(queueLabel).String(), Detail: apivalidation.FieldImmutableErrorMsg}},
		},
		{
			name: "the queue name of a suspended job is removed in a namespace without a LocalQueue default",
			old:  suspended().Obj(), job: withoutQueue(suspended()),
		},
		{
			name: "the queue name of a suspended job is removed in a namespace with a LocalQueue default",
			old:  suspended().Obj(), job: withoutQueue(suspended()), defaultQueueExists: true,
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(queueLabel).String(),
				Detail: "queue-name must not be empty in namespace with default queue"}},
		},
		{
			name: "a workload priority class is added to a suspended job",
			old:  suspended().Obj(), job: suspended().Label(priorityClassLabel, "high").Obj(),
		},
		{
			name: "a workload priority class is added to a running job",
			old:  running().Obj(), job: running().Label(priorityClassLabel, "high").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(priorityClassLabel).String(),
				Detail: "WorkloadPriorityClass cannot be added to a non-suspended workload"}},
		},
		{
			name: "the workload priority class of a running job changes",
			old:  running().Label(priorityClassLabel, "low").Obj(), job: running().Label(priorityClassLabel, "high").Obj(),
		},
		{
			name: "the workload priority class of a suspended job is removed",
			old:  suspended().Label(priorityClassLabel, "low").Obj(), job: suspended().Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(priorityClassLabel).String(),
				Detail: "WorkloadPriorityClass cannot be removed from a workload"}},
		},
		{
			name: "the max execution time of a suspended job changes",
			old:  suspended().Label(maxExecTimeLabel, "60").Obj(), job: suspended().Label(maxExecTimeLabel, "120").Obj(),
		},
		{
			name: "the max execution time of a running job changes",
			old:  running().Label(maxExecTimeLabel, "60").Obj(), job: running().Label(maxExecTimeLabel, "120").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: labels.Key(maxExecTimeLabel).String(), Detail: apivalidation.FieldImmutableErrorMsg}},
		},
		{
			name: "a min parallelism is added that is not below the pods run at once",
			old:  suspended().Obj(), job: suspended().Annotation(MinParallelismAnnotation, "9").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: minParallelismPath.String(),
				Detail: "must be from 1 to 3, less than the 4 pods the job runs at once (min(parallelism, indexes))"}},
		},
		{
			name: "Kueue admits a job partially: resumed with a lower parallelism",
			old:  suspended().Annotation(MinParallelismAnnotation, "2").Obj(),
			job:  running().Annotation(MinParallelismAnnotation, "2").Parallelism(3).Obj(),
		},
		{
			name: "the parallelism of a job running with partial admission changes",
			old:  running().Annotation(MinParallelismAnnotation, "2").Parallelism(3).Obj(),
			job:  running().Annotation(MinParallelismAnnotation, "2").Parallelism(4).Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: parallelismPath.String(),
				Detail: "cannot change while the job runs with partial admission (annotation kueue.x-k8s.io/job-min-parallelism): " +
					"Kueue admitted this parallelism"}},
		},
		{
			name: "the parallelism of a running job without partial admission changes",
			old:  running().Obj(), job: running().Parallelism(2).Obj(),
		},
		{
			name: "the elastic-job annotation is added",
			old:  suspended().Obj(), job: suspended().Annotation(elasticAnnotation, "true").Obj(),
			want: field.ErrorList{
				{Type: field.ErrorTypeForbidden, Field: "metadata.annotations[" + elasticAnnotation + "]",
					Detail: `elastic job is not supported for "batch.indexedjob.dev/v1alpha1, Kind=IndexedBatchJob"`},
				{Type: field.ErrorTypeInvalid, Field: "metadata.annotations[" + elasticAnnotation + "]", Detail: apivalidation.FieldImmutableErrorMsg},
			},
		},
		{
			name: "an admission gate is added after creation",
			old:  suspended().Obj(), job: suspended().Annotation(gatedByAnnotation, "example.com/gate").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "metadata.annotations[" + gatedByAnnotation + "]",
				Detail: "cannot add admission gate after creation"}},
		},
		{
			name: "an admission gate is removed",
			old:  suspended().Annotation(gatedByAnnotation, "example.com/gate").Obj(), job: suspended().Obj(),
		},
		{
			name: "a running job's template gets a required topology that is no label name",
			old:  running().Obj(), job: running().PodAnnotation(kueuev1beta2.PodSetRequiredTopologyAnnotation, "rack?").Obj(),
			want: field.ErrorList{{Type: field.ErrorTypeInvalid,
				Field: "spec.template.metadata.annotations[" + kueuev1beta2.PodSetRequiredTopologyAnnotation + "]",
				Detail: "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric " +
					"character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := validateUpdate((*Job)(tc.old), (*Job)(tc.job), func(string) bool { return tc.defaultQueueExists })
			if diff := cmp.Diff(tc.want, got, compareErrors); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
		})
	}
}

// TestKueueValidatesOnlyWhileActive checks that a queue name means nothing
// to the webhook before Kueue's API is served (kueueapi.ModeAuto).
func TestKueueValidatesOnlyWhileActive(t *testing.T) {
	bad := queued().Label(queueLabel, "Not_A_Name").Obj()
	for _, tc := range []struct {
		name        string
		integration *Integration
		wantErrs    int
	}{
		{"disabled", nil, 0},
		{"waiting for Kueue's API", &Integration{mode: kueueapi.ModeAuto}, 0},
		{"enabled", &Integration{mode: kueueapi.ModeEnabled}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.integration.Validator(nil)
			created, err := v.ValidateCreate(context.Background(), bad)
			if err != nil {
				t.Fatal(err)
			}
			updated, err := v.ValidateUpdate(context.Background(), bad, bad)
			if err != nil {
				t.Fatal(err)
			}
			if len(created) != tc.wantErrs || len(updated) != tc.wantErrs {
				t.Errorf("errors on create %v, on update %v; want %d each", created, updated, tc.wantErrs)
			}
		})
	}
}
