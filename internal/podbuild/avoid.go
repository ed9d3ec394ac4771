package podbuild

import (
	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// nodeNameField is the node field a node selector requirement matches a
// node's name by.
const nodeNameField = "metadata.name"

// avoidWeight is the weight of the preferred term of
// spec.nodeAvoidance Preferred: the most a term may have, so that the
// avoidance outweighs any one preference of the template's.
const avoidWeight = 100

// avoidNodes writes the nodes a pod avoids into its node affinity, as
// metadata.name NotIn matches (a node's name, not a label any node may
// carry or lack), one a node: the API server takes a single value in an
// In or NotIn match on a field, and the matches of a term are ANDed, so
// together they leave out every node. For mode Required they go into each
// of the template's required node selector terms (the terms are ORed, so
// every one must leave the nodes out), or a term of their own when the
// template has none; for Preferred, into a preferred term of weight 100.
// The template's own terms are kept as they are.
func avoidNodes(job *ibjv1.IndexedBatchJob, spec *corev1.PodSpec, nodes []string) {
	na := job.Spec.NodeAvoidance
	if na == nil || len(nodes) == 0 {
		return
	}
	notIn := func() []corev1.NodeSelectorRequirement {
		reqs := make([]corev1.NodeSelectorRequirement, len(nodes))
		for i, n := range nodes {
			reqs[i] = corev1.NodeSelectorRequirement{Key: nodeNameField, Operator: corev1.NodeSelectorOpNotIn, Values: []string{n}}
		}
		return reqs
	}
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	aff := spec.Affinity.NodeAffinity
	if na.Mode == ibjv1.NodeAvoidanceRequired {
		if aff.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			aff.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
		}
		terms := aff.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
		if len(terms) == 0 {
			terms = []corev1.NodeSelectorTerm{{}}
		}
		for i := range terms {
			terms[i].MatchFields = append(terms[i].MatchFields, notIn()...)
		}
		aff.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = terms
		return
	}
	aff.PreferredDuringSchedulingIgnoredDuringExecution = append(aff.PreferredDuringSchedulingIgnoredDuringExecution,
		corev1.PreferredSchedulingTerm{Weight: avoidWeight, Preference: corev1.NodeSelectorTerm{MatchFields: notIn()}})
}
