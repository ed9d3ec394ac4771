// Package workloadapi holds the few scheduling.k8s.io/v1beta1 types of
// Kubernetes' Workload API (Workload and PodGroup, KEP-4671) that gang
// scheduling needs, as small local types sent as unstructured objects. The
// operator's k8s.io/api (pinned by Kueue and controller-runtime) predates
// v1beta1, and the API is beta and off by default: keeping its shape here
// keeps its churn out of the controller. It also says what a job's gang
// is (Name, MinCount), which the operator and kubectl ibj both read.
//
// The types are not CRDs: controller-gen skips the package.
//
// +kubebuilder:skip
package workloadapi

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
)

// GroupVersion is the API version of Workload and PodGroup this package
// speaks: beta since Kubernetes 1.37, served where kube-apiserver runs with
// feature gate GenericWorkload and --runtime-config=scheduling.k8s.io/v1beta1=true.
var GroupVersion = schema.GroupVersion{Group: "scheduling.k8s.io", Version: "v1beta1"}

// Kinds of the Workload API.
var (
	WorkloadGVK = GroupVersion.WithKind("Workload")
	PodGroupGVK = GroupVersion.WithKind("PodGroup")
)

// Workload is scheduling.k8s.io/v1beta1 Workload: what a workload's pods
// need from the scheduler, as templates of the PodGroups made from it.
type Workload struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WorkloadSpec `json:"spec"`
}

// WorkloadSpec is the part of the Workload's spec the operator sets.
type WorkloadSpec struct {
	// ControllerRef names the object that runs the workload (the job).
	ControllerRef *TypedLocalObjectReference `json:"controllerRef,omitempty"`
	// PodGroupTemplates are the groups of the workload's pods.
	PodGroupTemplates []PodGroupTemplate `json:"podGroupTemplates"`
}

// TypedLocalObjectReference names an object in the Workload's namespace.
type TypedLocalObjectReference struct {
	APIGroup string `json:"apiGroup,omitempty"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
}

// PodGroupTemplate is one group of a Workload's pods.
type PodGroupTemplate struct {
	Name             string           `json:"name"`
	SchedulingPolicy SchedulingPolicy `json:"schedulingPolicy"`
}

// SchedulingPolicy is how the scheduler places a group's pods; the operator
// sets only Gang.
type SchedulingPolicy struct {
	Gang *GangSchedulingPolicy `json:"gang,omitempty"`
}

// GangSchedulingPolicy: the scheduler binds none of the group's pods until
// it can bind at least MinCount of them at once.
type GangSchedulingPolicy struct {
	MinCount int32 `json:"minCount"`
}

// PodGroup is scheduling.k8s.io/v1beta1 PodGroup: the runtime group a pod
// names in spec.schedulingGroup.podGroupName.
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PodGroupSpec `json:"spec"`
}

// PodGroupSpec is the part of the PodGroup's spec the operator sets.
type PodGroupSpec struct {
	// WorkloadRef names the Workload and its template the group was made from.
	WorkloadRef *WorkloadReference `json:"workloadRef,omitempty"`
	// SchedulingPolicy is copied from the template.
	SchedulingPolicy SchedulingPolicy `json:"schedulingPolicy"`
}

// WorkloadReference names a PodGroupTemplate of a Workload.
type WorkloadReference struct {
	WorkloadName string `json:"workloadName"`
	TemplateName string `json:"templateName"`
}

// Name is the name of the job's Workload and PodGroup: the job's name
// and the start of its UID, so that a job created again under the same
// name while the garbage collector still deletes its predecessor's objects
// never finds their names taken.
func Name(job *ibjv1.IndexedBatchJob) string {
	uid := string(job.UID)
	if len(uid) > 8 {
		uid = uid[:8]
	}
	return job.Name + "-" + uid
}

// MinCount is the gang's size the PodGroup should have: minCount, or
// parallelism, but never more than the wanted indexes the job's status
// does not record as finished (a gang larger than the pods left to run
// would never form, and hold the job's last pods for good); at least 1.
// It reads the last recorded status, so it follows the job's progress one
// status write behind.
func MinCount(job *ibjv1.IndexedBatchJob) int32 {
	n := ptr.Deref(job.Spec.Parallelism, 1)
	if g := job.Spec.GangScheduling; g != nil && g.MinCount != nil {
		n = min(n, *g.MinCount)
	}
	wanted, _ := indexset.OfJob(job) // unreadable: the operator starts no pod
	if done, err := indexset.Parse(job.Status.CompletedIndexes, 0); err == nil {
		wanted = wanted.Difference(done)
	}
	if failed := job.Status.FailedIndexes; failed != nil {
		if set, err := indexset.Parse(*failed, 0); err == nil {
			wanted = wanted.Difference(set)
		}
	}
	n = min(n, int32(min(wanted.Len(), 1<<30)))
	return max(n, 1)
}

// Unstructured converts a Workload or PodGroup of this package to the
// unstructured object a controller-runtime client sends, with its kind.
func Unstructured(obj any, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// Empty is an unstructured object of kind gvk to read into.
func Empty(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}

// GangMinCount reads spec.schedulingPolicy.gang.minCount of a PodGroup, or
// of a Workload's first PodGroupTemplate; false when it has none.
func GangMinCount(u *unstructured.Unstructured) (int64, bool) {
	policy := []string{"spec", "schedulingPolicy"}
	if u.GroupVersionKind().Kind == WorkloadGVK.Kind {
		templates, _, _ := unstructured.NestedSlice(u.Object, "spec", "podGroupTemplates")
		if len(templates) == 0 {
			return 0, false
		}
		first, ok := templates[0].(map[string]any)
		if !ok {
			return 0, false
		}
		n, found, err := unstructured.NestedInt64(first, "schedulingPolicy", "gang", "minCount")
		return n, found && err == nil
	}
	n, found, err := unstructured.NestedInt64(u.Object, append(policy, "gang", "minCount")...)
	return n, found && err == nil
}

// SetGangMinCount sets the gang's minCount of a PodGroup, or of every
// PodGroupTemplate of a Workload (the operator's have one): the one field
// of either the API lets change.
func SetGangMinCount(u *unstructured.Unstructured, n int32) error {
	if u.GroupVersionKind().Kind == WorkloadGVK.Kind {
		templates, _, err := unstructured.NestedSlice(u.Object, "spec", "podGroupTemplates")
		if err != nil {
			return err
		}
		for i := range templates {
			t, ok := templates[i].(map[string]any)
			if !ok {
				return errors.New("workload's podGroupTemplates hold a non-object")
			}
			if err := unstructured.SetNestedField(t, int64(n), "schedulingPolicy", "gang", "minCount"); err != nil {
				return err
			}
		}
		return unstructured.SetNestedSlice(u.Object, templates, "spec", "podGroupTemplates")
	}
	return unstructured.SetNestedField(u.Object, int64(n), "spec", "schedulingPolicy", "gang", "minCount")
}

// IsNotServed reports whether err says the API server does not serve the
// Workload API: no REST mapping for the kind (discovery does not list it),
// or a 404 for its resource path.
func IsNotServed(err error) bool {
	if err == nil {
		return false
	}
	if meta.IsNoMatchError(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) && apierrors.IsNotFound(err) {
		// A NotFound naming no object (no details name) is the resource
		// path itself missing; a missing object names itself.
		d := status.Status().Details
		return d == nil || d.Name == ""
	}
	return false
}
