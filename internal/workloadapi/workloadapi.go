// Package workloadapi holds the few scheduling.k8s.io/v1beta1 types of
// Kubernetes' Workload API (Workload and PodGroup, KEP-4671) that a job's
// spec.scheduling (and the deprecated gangScheduling) needs, as small
// local types sent as unstructured objects. The operator's k8s.io/api
// (pinned by Kueue and controller-runtime) predates v1beta1, and the API
// is beta and off by default: keeping its shape here keeps its churn out
// of the controller. It also says what a job asks of it (job.go: Wanted,
// Gang, Name, MinCount, Template), which the operator, its webhook and
// kubectl ibj all read.
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

// PodGroupTemplate is one group of a Workload's pods: how the scheduler
// places them, as the PodGroups made from it say again.
type PodGroupTemplate struct {
	Name             string           `json:"name"`
	SchedulingPolicy SchedulingPolicy `json:"schedulingPolicy"`
	// SchedulingConstraints is served with feature gate
	// TopologyAwareWorkloadScheduling; without it the API server drops it.
	SchedulingConstraints *PodGroupSchedulingConstraints `json:"schedulingConstraints,omitempty"`
	// ResourceClaims is served with feature gate DRAWorkloadResourceClaims;
	// without it the API server drops it.
	ResourceClaims    []PodGroupResourceClaim `json:"resourceClaims,omitempty"`
	DisruptionMode    *DisruptionMode         `json:"disruptionMode,omitempty"`
	PriorityClassName string                  `json:"priorityClassName,omitempty"`
}

// SchedulingPolicy is how the scheduler places a group's pods: exactly one
// of Basic (one by one) and Gang (all or none).
type SchedulingPolicy struct {
	Basic *BasicSchedulingPolicy `json:"basic,omitempty"`
	Gang  *GangSchedulingPolicy  `json:"gang,omitempty"`
}

// BasicSchedulingPolicy: the group's pods are placed one by one.
type BasicSchedulingPolicy struct{}

// GangSchedulingPolicy: the scheduler binds none of the group's pods until
// it can bind at least MinCount of them at once.
type GangSchedulingPolicy struct {
	MinCount int32 `json:"minCount"`
}

// PodGroupSchedulingConstraints are where a group's pods go together.
type PodGroupSchedulingConstraints struct {
	Topology []TopologyConstraint `json:"topology,omitempty"`
}

// TopologyConstraint keeps a group's pods within one value of a node label.
type TopologyConstraint struct {
	Key string `json:"key"`
}

// PodGroupResourceClaim is a ResourceClaim the group's pods share: a pod
// consumes it with a claim of the same name and source in its own
// spec.resourceClaims.
type PodGroupResourceClaim struct {
	Name                      string  `json:"name"`
	ResourceClaimName         *string `json:"resourceClaimName,omitempty"`
	ResourceClaimTemplateName *string `json:"resourceClaimTemplateName,omitempty"`
}

// DisruptionMode is how a group's pods may be disrupted: each on its own
// (Single, the API's default) or together (All).
type DisruptionMode struct {
	Single *SingleDisruptionMode `json:"single,omitempty"`
	All    *AllDisruptionMode    `json:"all,omitempty"`
}

// SingleDisruptionMode: each pod may be disrupted on its own.
type SingleDisruptionMode struct{}

// AllDisruptionMode: the group's pods are disrupted together.
type AllDisruptionMode struct{}

// PodGroup is scheduling.k8s.io/v1beta1 PodGroup: the runtime group a pod
// names in spec.schedulingGroup.podGroupName.
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              PodGroupSpec `json:"spec"`
}

// PodGroupSpec is the part of the PodGroup's spec the operator sets: its
// template's fields, copied, which is what kube-scheduler reads.
type PodGroupSpec struct {
	// WorkloadRef names the Workload and its template the group was made from.
	WorkloadRef           *WorkloadReference             `json:"workloadRef,omitempty"`
	SchedulingPolicy      SchedulingPolicy               `json:"schedulingPolicy"`
	SchedulingConstraints *PodGroupSchedulingConstraints `json:"schedulingConstraints,omitempty"`
	ResourceClaims        []PodGroupResourceClaim        `json:"resourceClaims,omitempty"`
	DisruptionMode        *DisruptionMode                `json:"disruptionMode,omitempty"`
	PriorityClassName     string                         `json:"priorityClassName,omitempty"`
}

// WorkloadReference names a PodGroupTemplate of a Workload.
type WorkloadReference struct {
	WorkloadName string `json:"workloadName"`
	TemplateName string `json:"templateName"`
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
