package harness

import (
	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// PodCreatePolicy is a ValidatingAdmissionPolicy that refuses, with message,
// the pod creates in namespace for which validation (a CEL expression on
// object) is false, and its binding (Deny), both named name; match, when
// not empty, is a CEL match condition that limits it to some pods. It
// stands for what a policy engine, a quota or a LimitRange refuses.
func PodCreatePolicy(name, namespace, match, validation, message string) (*admissionv1.ValidatingAdmissionPolicy, *admissionv1.ValidatingAdmissionPolicyBinding) {
	policy := &admissionv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy:    ptr.To(admissionv1.Fail),
			MatchConstraints: podCreates(),
			Validations:      []admissionv1.Validation{{Expression: validation, Message: message}},
		},
	}
	if match != "" {
		policy.Spec.MatchConditions = []admissionv1.MatchCondition{{Name: "match", Expression: match}}
	}
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
			MatchResources:    inNamespace(namespace),
		},
	}
	return policy, binding
}

// PodMutatePolicy is a MutatingAdmissionPolicy that applies patch (a CEL
// expression giving a list of JSONPatch) to the pod creates in namespace,
// and its binding, both named name; match, when not empty, is a CEL match
// condition that limits it to some pods. It stands for a policy engine or
// a platform team's policy that rewrites pods at admission.
func PodMutatePolicy(name, namespace, match, patch string) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	return podMutatingPolicy(name, namespace, match,
		admissionv1.Mutation{PatchType: admissionv1.PatchTypeJSONPatch, JSONPatch: &admissionv1.JSONPatch{Expression: patch}})
}

func podMutatingPolicy(name, namespace, match string, m admissionv1.Mutation) (*admissionv1.MutatingAdmissionPolicy, *admissionv1.MutatingAdmissionPolicyBinding) {
	policy := &admissionv1.MutatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicySpec{
			FailurePolicy:      ptr.To(admissionv1.Fail),
			MatchConstraints:   podCreates(),
			Mutations:          []admissionv1.Mutation{m},
			ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
		},
	}
	if match != "" {
		policy.Spec.MatchConditions = []admissionv1.MatchCondition{{Name: "match", Expression: match}}
	}
	binding := &admissionv1.MutatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{
			PolicyName:     name,
			MatchResources: inNamespace(namespace),
		},
	}
	return policy, binding
}

// RemoveLabelPatch is a PodMutatePolicy patch that removes the pod's label
// key.
func RemoveLabelPatch(key string) string {
	return `[JSONPatch{op: "remove", path: "/metadata/labels/" + jsonpatch.escapeKey("` + key + `")}]`
}

// AddInitContainerPatch is a PodMutatePolicy patch that appends the init
// container container (a CEL Object.spec.initContainers{...}) to the pod's,
// as a service mesh injects its sidecar.
func AddInitContainerPatch(container string) string {
	return `has(object.spec.initContainers) ? ` +
		`[JSONPatch{op: "add", path: "/spec/initContainers/-", value: ` + container + `}] : ` +
		`[JSONPatch{op: "add", path: "/spec/initContainers", value: [` + container + `]}]`
}

// SetAnnotationPatch is a PodMutatePolicy patch that sets the pod's
// annotation key to value.
func SetAnnotationPatch(key, value string) string {
	return `[JSONPatch{op: "replace", path: "/metadata/annotations/" + jsonpatch.escapeKey("` + key + `"), value: "` + value + `"}]`
}

// podCreates matches the creates of pods.
func podCreates() *admissionv1.MatchResources {
	return &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
		RuleWithOperations: admissionv1.RuleWithOperations{
			Operations: []admissionv1.OperationType{admissionv1.Create},
			Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
		},
	}}}
}

// inNamespace matches the objects of one namespace.
func inNamespace(namespace string) *admissionv1.MatchResources {
	return &admissionv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
		MatchLabels: map[string]string{"kubernetes.io/metadata.name": namespace},
	}}
}
