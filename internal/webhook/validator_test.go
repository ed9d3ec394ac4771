package webhook

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestJobField(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	job.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "A"}, {Name: ibjv1.CompletionIndexEnvName}, {Name: "B=C"},
	}
	job.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "X"}}}}
	cases := map[string]string{
		"spec.containers[0].name":                    "spec.template.spec.containers[0].name",
		"spec.containers[0].env[1].name":             "spec.template.spec.containers[0].env[0].name",
		"spec.containers[0].env[2].name":             "spec.template.spec.containers[0].env[2].name",
		"spec.initContainers[0].env[1].valueFrom":    "spec.template.spec.initContainers[0].env[0].valueFrom",
		"spec.containers[0].env[0].name":             "spec.template.spec.containers[0].env[0].name",
		"spec.volumes[0].name":                       "spec.template.spec.volumes[0].name",
		"spec":                                       "spec.template.spec",
		"metadata.labels":                            "spec.template.metadata.labels",
		"metadata.generateName":                      "metadata.name",
		"metadata.name":                              "metadata.name",
		"":                                           "",
		"spec.containers[0].resources.requests[cpu]": "spec.template.spec.containers[0].resources.requests[cpu]",
	}
	for pod, want := range cases {
		if got := jobField(job, pod); got != want {
			t.Errorf("jobField(%q) = %q, want %q", pod, got, want)
		}
	}
}

func TestInvalidJobRestatesThePodsCausesForTheJob(t *testing.T) {
	job := harness.MakeIndexedBatchJob("bad", "ns").Obj()
	pod := metav1.Status{Message: `Pod "bad-0-0-x" is invalid: ...`, Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{
		{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.containers[0].name", Message: `Invalid value: "Main_1": a lowercase RFC 1123 label`},
		{Type: metav1.CauseTypeFieldValueNotFound, Field: "spec.containers[0].volumeMounts[0].name", Message: `Not found: "data"`},
	}}}
	got := invalidJob(job, pod).ErrStatus
	want := metav1.Status{
		Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid,
		Details: &metav1.StatusDetails{Group: "batch.indexedjob.dev", Kind: "IndexedBatchJob", Name: "bad", Causes: []metav1.StatusCause{
			{Type: metav1.CauseTypeFieldValueInvalid, Field: "spec.template.spec.containers[0].name", Message: `Invalid value: "Main_1": a lowercase RFC 1123 label`},
			{Type: metav1.CauseTypeFieldValueNotFound, Field: "spec.template.spec.containers[0].volumeMounts[0].name", Message: `Not found: "data"`},
		}},
		Message: `IndexedBatchJob.batch.indexedjob.dev "bad" is invalid: [spec.template.spec.containers[0].name: Invalid value: "Main_1": a lowercase RFC 1123 label, ` +
			`spec.template.spec.containers[0].volumeMounts[0].name: Not found: "data"]`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

// FuzzJobField checks that restating a pod's field path for the job never
// panics, keeps every spec and metadata path under the job's template, and
// maps an env entry only to an entry that exists in the template.
func FuzzJobField(f *testing.F) {
	for _, s := range []string{
		"spec.containers[0].env[1].name", "spec.initContainers[0].env[1].valueFrom", "spec.containers[9].env[1]",
		"spec.containers[0].env[99999999999999999999].name", "metadata.labels", "metadata.name", "spec", "", "status.phase",
	} {
		f.Add(s)
	}
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	job.Spec.Template.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "A"}, {Name: ibjv1.CompletionIndexEnvName}, {Name: "B"}}
	job.Spec.Template.Spec.InitContainers = []corev1.Container{{Name: "init", Env: []corev1.EnvVar{{Name: "X"}}}}
	f.Fuzz(func(t *testing.T, podField string) {
		got := jobField(job, podField)
		switch {
		case podField == "metadata.name" || podField == "metadata.generateName":
			if got != "metadata.name" {
				t.Fatalf("jobField(%q) = %q, want metadata.name", podField, got)
			}
		case podField == "spec" || podField == "metadata" || strings.HasPrefix(podField, "spec.") || strings.HasPrefix(podField, "metadata."):
			if !strings.HasPrefix(got, "spec.template.") {
				t.Fatalf("jobField(%q) = %q, not under spec.template", podField, got)
			}
		default:
			if got != podField {
				t.Fatalf("jobField(%q) = %q, want it unchanged", podField, got)
			}
		}
		if m := envField.FindStringSubmatch(strings.TrimPrefix(got, "spec.template.")); m != nil && got != "spec.template."+podField {
			containers := job.Spec.Template.Spec.Containers
			if m[1] == "initContainers" {
				containers = job.Spec.Template.Spec.InitContainers
			}
			c, e := atoi(m[2]), atoi(m[3])
			if c >= len(containers) || e >= len(containers[c].Env) || containers[c].Env[e].Name == ibjv1.CompletionIndexEnvName {
				t.Fatalf("jobField(%q) = %q names no env entry of the template", podField, got)
			}
		}
	})
}

func TestContainersMayChangeOnlyInTheirResources(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns").Suspend(true).InitContainer("setup").Obj()
	cases := []struct {
		name   string
		change func(*corev1.PodSpec)
		want   []string
	}{
		{name: "nothing", change: func(*corev1.PodSpec) {}},
		{name: "resources of both lists", change: func(s *corev1.PodSpec) {
			s.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")}
			s.InitContainers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
		}},
		{name: "scheduling directives are not containers", change: func(s *corev1.PodSpec) {
			s.NodeSelector = map[string]string{"pool": "a"}
		}},
		{name: "an image", change: func(s *corev1.PodSpec) { s.Containers[0].Image = "other" },
			want: []string{"spec.template.spec.containers[0]"}},
		{name: "an init container's env beside resources", change: func(s *corev1.PodSpec) {
			s.InitContainers[0].Env = []corev1.EnvVar{{Name: "A"}}
			s.InitContainers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")}
		}, want: []string{"spec.template.spec.initContainers[0]"}},
		{name: "a container added: the CRD's rule refuses it", change: func(s *corev1.PodSpec) {
			s.Containers = append(s.Containers, corev1.Container{Name: "b"})
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := base.DeepCopy()
			tc.change(&job.Spec.Template.Spec)
			var got []string
			for _, e := range containersChangedBeyondResources(base, job) {
				got = append(got, e.Field)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("refused fields (-want +got):\n%s", diff)
			}
		})
	}
}

// fixedQueue is a queueing system's validation that answers errs, or err.
type fixedQueue struct {
	errs field.ErrorList
	err  error
}

func (q fixedQueue) ValidateCreate(context.Context, *ibjv1.IndexedBatchJob) (field.ErrorList, error) {
	return q.errs, q.err
}

func (q fixedQueue) ValidateUpdate(context.Context, *ibjv1.IndexedBatchJob, *ibjv1.IndexedBatchJob) (field.ErrorList, error) {
	return q.errs, q.err
}

// TestValidatorAppliesTheQueueingSystemsRules checks that a queueing
// system's errors refuse a create (beside the job's own errors) and an
// update that leaves the template alone, and that a failure to judge
// refuses the request; none of these reaches the dry run of the pods.
func TestValidatorAppliesTheQueueingSystemsRules(t *testing.T) {
	queueLabel := field.NewPath("metadata", "labels").Key("kueue.x-k8s.io/queue-name")
	immutable := field.ErrorList{field.Invalid(queueLabel, "other", "field is immutable")}
	job := harness.MakeIndexedBatchJob("a", "ns").Label("kueue.x-k8s.io/queue-name", "other").Obj()
	reserved := harness.MakeIndexedBatchJob("a", "ns").PodLabel(ibjv1.JobNameLabel, "x").Label("kueue.x-k8s.io/queue-name", "other").Obj()
	cases := []struct {
		name    string
		queue   fixedQueue
		run     func(v *Validator) error
		wantErr string
	}{
		{
			name:  "create: the job's own errors and the queue's",
			queue: fixedQueue{errs: immutable},
			run: func(v *Validator) error {
				_, err := v.ValidateCreate(context.Background(), reserved)
				return err
			},
			wantErr: `IndexedBatchJob.batch.indexedjob.dev "a" is invalid: [spec.template.metadata.labels[batch.indexedjob.dev/job-name]: ` +
				`Forbidden: is reserved: the operator sets it on every pod it creates, ` +
				`metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable]`,
		},
		{
			name:  "update of a label alone",
			queue: fixedQueue{errs: immutable},
			run: func(v *Validator) error {
				_, err := v.ValidateUpdate(context.Background(), job, job)
				return err
			},
			wantErr: `IndexedBatchJob.batch.indexedjob.dev "a" is invalid: metadata.labels[kueue.x-k8s.io/queue-name]: Invalid value: "other": field is immutable`,
		},
		{
			name:  "update the queue could not judge",
			queue: fixedQueue{err: errors.New("reading LocalQueue ns/default: timeout")},
			run: func(v *Validator) error {
				_, err := v.ValidateUpdate(context.Background(), job, job)
				return err
			},
			wantErr: "reading LocalQueue ns/default: timeout",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := NewValidator(nil, DefaultDryRunTimeout)
			v.Queue = tc.queue
			err := tc.run(v)
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("error = %v\nwant %s", err, tc.wantErr)
			}
		})
	}
}
