package v1alpha1

// The types of spec.scheduling: batch/v1 JobSpec.scheduling
// (JobSchedulingConfiguration, Kubernetes 1.37 behind feature gate
// WorkloadWithJob), whose building blocks are scheduling.k8s.io/v1's
// WorkloadPodGroup* types in 1.38. They are the project's own, field for
// field and with upstream's names, JSON and validation messages, until a
// final k8s.io/api release holds them: then each becomes an alias of
// upstream's and no stored job changes.
//
// Upstream's declarative validation is written here as CEL: unions as two
// rules (none set: "must specify one of", several: "must specify exactly
// one of"), +k8s:immutable as "field is immutable", +k8s:update=NoSet and
// NoUnset as "field cannot be set once created" and "field cannot be
// cleared once set", each at upstream's field path. The rules that read
// the rest of the spec (minCount and parallelism, schedulingGroup, both
// scheduling and gangScheduling set, and setting or clearing the whole
// block) are on IndexedBatchJobSpec.

// JobSchedulingConfiguration is the workload-aware scheduling of the
// job's pods: the operator writes it into the Workload and PodGroup it
// creates for the job, and kube-scheduler places the pods by them. Every
// part but schedulingPolicy.gang.minCount is immutable.
//
// +kubebuilder:validation:XValidation:rule="!has(self.schedulingPolicy) || has(oldSelf.schedulingPolicy)",message="field cannot be set once created",fieldPath=".schedulingPolicy"
// +kubebuilder:validation:XValidation:rule="has(self.schedulingPolicy) || !has(oldSelf.schedulingPolicy)",message="field cannot be cleared once set",fieldPath=".schedulingPolicy"
// +kubebuilder:validation:XValidation:rule="!has(self.schedulingPolicy) || !has(oldSelf.schedulingPolicy) || has(self.schedulingPolicy.basic) == has(oldSelf.schedulingPolicy.basic)",message="the basic/gang policy variant is immutable after creation; only schedulingPolicy.gang.minCount may be updated",fieldPath=".schedulingPolicy"
// +kubebuilder:validation:XValidation:rule="has(self.schedulingConstraints) == has(oldSelf.schedulingConstraints) && (!has(self.schedulingConstraints) || self.schedulingConstraints == oldSelf.schedulingConstraints)",message="field is immutable",fieldPath=".schedulingConstraints"
// +kubebuilder:validation:XValidation:rule="has(self.disruptionMode) == has(oldSelf.disruptionMode) && (!has(self.disruptionMode) || self.disruptionMode == oldSelf.disruptionMode)",message="field is immutable",fieldPath=".disruptionMode"
// +kubebuilder:validation:XValidation:rule="has(self.resourceClaims) == has(oldSelf.resourceClaims) && (!has(self.resourceClaims) || self.resourceClaims == oldSelf.resourceClaims)",message="field is immutable",fieldPath=".resourceClaims"
// +kubebuilder:validation:XValidation:rule="!has(self.disruptionMode) || !has(self.disruptionMode.all) || (has(self.schedulingPolicy) && has(self.schedulingPolicy.gang))",message="the disruptionMode `all` is not supported with the Basic scheduling policy",fieldPath=".disruptionMode"
type JobSchedulingConfiguration struct {
	// schedulingPolicy is how kube-scheduler places the job's pods:
	// exactly one of basic (one by one, the default when unset) or gang
	// (all or none). It may not be added or removed after creation, and
	// the variant (basic or gang) is fixed; only gang.minCount may change.
	// +optional
	SchedulingPolicy *WorkloadPodGroupSchedulingPolicy `json:"schedulingPolicy,omitempty"`

	// schedulingConstraints are constraints on where the job's pods go
	// together, such as one topology domain for all of them. Immutable.
	// +optional
	SchedulingConstraints *WorkloadPodGroupSchedulingConstraints `json:"schedulingConstraints,omitempty"`

	// disruptionMode is how the job's pods may be disrupted: single (each
	// on its own, the default) or all (together: kube-scheduler preempts
	// every pod of the group when it preempts one). all needs the gang
	// policy. Immutable.
	// +optional
	DisruptionMode *WorkloadPodGroupDisruptionMode `json:"disruptionMode,omitempty"`

	// resourceClaims are ResourceClaims shared by all the job's pods: each
	// is allocated once, for the group, and a pod consumes its devices by
	// listing, in the template's spec.resourceClaims, a claim of the same
	// name referring to the same ResourceClaim or ResourceClaimTemplate. At
	// most 4, the limit of the PodGroup they go to. Immutable: entries may
	// neither be added, removed nor changed.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=4
	ResourceClaims []WorkloadPodGroupResourceClaim `json:"resourceClaims,omitempty"`
}

// WorkloadPodGroupSchedulingPolicy is the scheduling policy of a group of
// pods: exactly one of basic and gang.
//
// +kubebuilder:validation:XValidation:rule="has(self.basic) || has(self.gang)",message="must specify one of: `basic`, `gang`"
// +kubebuilder:validation:XValidation:rule="!has(self.basic) || !has(self.gang)",message="must specify exactly one of: `basic`, `gang`"
type WorkloadPodGroupSchedulingPolicy struct {
	// basic places the pods one by one, as without a policy.
	// +optional
	Basic *WorkloadPodGroupBasicSchedulingPolicy `json:"basic,omitempty"`

	// gang places the pods all or none.
	// +optional
	Gang *WorkloadPodGroupGangSchedulingPolicy `json:"gang,omitempty"`
}

// WorkloadPodGroupBasicSchedulingPolicy is standard, pod-by-pod
// scheduling. It has no fields.
type WorkloadPodGroupBasicSchedulingPolicy struct{}

// WorkloadPodGroupGangSchedulingPolicy is all-or-nothing scheduling.
type WorkloadPodGroupGangSchedulingPolicy struct {
	// minCount is how many of the job's pods kube-scheduler must be able
	// to place at once before it binds any. Defaults to parallelism. At
	// least 1 and at most parallelism; it may change while the job runs.
	// Once fewer of the job's indexes are left unfinished, the operator
	// gives the PodGroup their number, so that the job's last pods are not
	// held waiting for a gang that can no longer form.
	// +optional
	// +kubebuilder:validation:XValidation:rule="self >= 1",message="must be greater than or equal to 1"
	MinCount *int32 `json:"minCount,omitempty"`
}

// WorkloadPodGroupSchedulingConstraints are constraints on where a group's
// pods are placed.
type WorkloadPodGroupSchedulingConstraints struct {
	// topology keeps all the job's pods in one domain of a node label, such
	// as one zone. At most one constraint.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=1
	Topology []WorkloadTopologyConstraint `json:"topology,omitempty"`
}

// WorkloadTopologyConstraint keeps a group's pods within one domain.
type WorkloadTopologyConstraint struct {
	// key is the key of the node label whose value is the domain, such as
	// topology.kubernetes.io/zone: every pod of the job goes to nodes with
	// the same value. A node without the label, or with an empty value, is
	// in no domain and takes none of the job's pods.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self != ''",message="Required value"
	// +kubebuilder:validation:XValidation:rule="self == '' || !format.qualifiedName().validate(self).hasValue()",messageExpression="format.qualifiedName().validate(self).value()[0]"
	Key string `json:"key"`
}

// WorkloadPodGroupResourceClaim is a ResourceClaim shared by a group's
// pods: exactly one of resourceClaimName and resourceClaimTemplateName.
//
// +kubebuilder:validation:XValidation:rule="has(self.resourceClaimName) || has(self.resourceClaimTemplateName)",message="must specify one of: `resourceClaimName`, `resourceClaimTemplateName`"
// +kubebuilder:validation:XValidation:rule="!has(self.resourceClaimName) || !has(self.resourceClaimTemplateName)",message="must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`"
type WorkloadPodGroupResourceClaim struct {
	// name identifies the claim in the group: the name a pod's own claim
	// must have to consume it. A DNS label.
	// +required
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="self != ''",message="Required value"
	// +kubebuilder:validation:XValidation:rule="self == '' || !format.dns1123Label().validate(self).hasValue()",messageExpression="format.dns1123Label().validate(self).value()[0]"
	Name string `json:"name"`

	// resourceClaimName is the name of a ResourceClaim in the job's
	// namespace, which the group's pods share. A DNS subdomain.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",messageExpression="format.dns1123Subdomain().validate(self).value()[0]"
	ResourceClaimName *string `json:"resourceClaimName,omitempty"`

	// resourceClaimTemplateName is the name of a ResourceClaimTemplate in
	// the job's namespace, from which one ResourceClaim is made for the
	// group. A DNS subdomain.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",messageExpression="format.dns1123Subdomain().validate(self).value()[0]"
	ResourceClaimTemplateName *string `json:"resourceClaimTemplateName,omitempty"`
}

// WorkloadPodGroupDisruptionMode is how a group's pods may be disrupted:
// exactly one of single and all.
//
// +kubebuilder:validation:XValidation:rule="has(self.single) || has(self.all)",message="must specify one of: `single`, `all`"
// +kubebuilder:validation:XValidation:rule="!has(self.single) || !has(self.all)",message="must specify exactly one of: `single`, `all`"
type WorkloadPodGroupDisruptionMode struct {
	// single lets each pod be disrupted on its own.
	// +optional
	Single *WorkloadPodGroupSingleDisruptionMode `json:"single,omitempty"`

	// all disrupts the group's pods together.
	// +optional
	All *WorkloadPodGroupAllDisruptionMode `json:"all,omitempty"`
}

// WorkloadPodGroupSingleDisruptionMode: each pod may be disrupted on its
// own. It has no fields.
type WorkloadPodGroupSingleDisruptionMode struct{}

// WorkloadPodGroupAllDisruptionMode: the group's pods are disrupted
// together. It has no fields.
type WorkloadPodGroupAllDisruptionMode struct{}
