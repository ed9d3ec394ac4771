package webhook

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// hostnameLabel is the node label kube-scheduler's hostname topology and
// the kubelet set to the node's hostname.
const hostnameLabel = "kubernetes.io/hostname"

// nodeNameField is the node field a node selector requirement matches a
// node's name by.
const nodeNameField = "metadata.name"

// defaultBackoffLimit is batch/v1's backoffLimit default, which the
// defaulter writes for a job without backoffLimitPerIndex.
const defaultBackoffLimit = 6

// nodeAvoidanceErrors refuses spec.nodeAvoidance mode Required where a
// retry could be left with no node at all, so that the job would wait
// Pending for ever rather than fail: a template that names its node, one
// pinned (by node name or hostname) to no more nodes than an index may
// fail on, one placed by Kueue's topology-aware scheduling (Kueue picks
// the nodes, and may pick an avoided one), and a gang (placed all or none,
// so one retry without a node holds back the whole group).
func nodeAvoidanceErrors(job *ibjv1.IndexedBatchJob) field.ErrorList {
	na := job.Spec.NodeAvoidance
	if na == nil || na.Mode != ibjv1.NodeAvoidanceRequired {
		return nil
	}
	mode := field.NewPath("spec", "nodeAvoidance", "mode")
	refuse := func(why string) *field.Error {
		return field.Invalid(mode, na.Mode, why+"; use mode Preferred, which the scheduler may set aside when no other node fits")
	}
	var errs field.ErrorList
	tmpl := &job.Spec.Template
	if tmpl.Spec.NodeName != "" {
		errs = append(errs, refuse(fmt.Sprintf("spec.template.spec.nodeName binds every pod to node %s, so a retry that avoids it could never run", tmpl.Spec.NodeName)))
	}
	if _, gang := workloadapi.Gang(job); gang {
		errs = append(errs, refuse(fmt.Sprintf("with %s the pods are placed all or none, so one retry left without a node would hold back the whole gang", gangField(job))))
	}
	if key := topologyAnnotation(tmpl.Annotations); key != "" {
		errs = append(errs, refuse(fmt.Sprintf("the template's annotation %s has Kueue place the pods (topology-aware scheduling), and the node it assigns a retry may be one the retry must avoid", key)))
	}
	if nodes, where := pinnedNodes(&tmpl.Spec); nodes != nil {
		retries, limit := retriesPerIndex(job)
		if int32(nodes.Len()) <= retries {
			errs = append(errs, refuse(fmt.Sprintf("%s pins the pods to %d node(s) (%s) and an index may be retried %d time(s) (%s): once it has failed on each of them its next retry could never be placed",
				where, nodes.Len(), strings.Join(sets.List(nodes), ", "), retries, limit)))
		}
	}
	return errs
}

// nodeAvoidanceWarnings are the settings under which mode Preferred can do
// nothing, said at admission rather than found out later.
func nodeAvoidanceWarnings(job *ibjv1.IndexedBatchJob) []string {
	na := job.Spec.NodeAvoidance
	if na == nil || na.Mode == ibjv1.NodeAvoidanceRequired {
		return nil
	}
	tmpl := &job.Spec.Template
	var out []string
	if tmpl.Spec.NodeName != "" {
		out = append(out, fmt.Sprintf("spec.nodeAvoidance: spec.template.spec.nodeName binds every pod to node %s without the scheduler, so no node can be avoided", tmpl.Spec.NodeName))
	}
	if key := topologyAnnotation(tmpl.Annotations); key != "" {
		out = append(out, fmt.Sprintf("spec.nodeAvoidance: the template's annotation %s has Kueue assign the pods' topology domains; the avoidance weighs only among the nodes of the domain Kueue assigns", key))
	}
	return out
}

// topologyAnnotation is the first of Kueue's topology-aware scheduling
// annotations the template carries, "" when none.
func topologyAnnotation(annotations map[string]string) string {
	for _, key := range sets.List(sets.KeySet(annotations)) {
		if strings.HasPrefix(key, "kueue.x-k8s.io/podset-") && strings.Contains(key, "-topology") {
			return key
		}
	}
	return ""
}

// pinnedNodes are the nodes the template restricts its pods to by name
// (metadata.name In) or hostname (kubernetes.io/hostname In, or the node
// selector), and where it says so; nil when it leaves them open: a
// required term without such a match lets any node in.
func pinnedNodes(spec *corev1.PodSpec) (sets.Set[string], string) {
	if h, ok := spec.NodeSelector[hostnameLabel]; ok {
		return sets.New(h), "spec.template.spec.nodeSelector"
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil, ""
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil, ""
	}
	all := sets.New[string]()
	for _, t := range terms {
		names := termNodes(t)
		if names == nil {
			return nil, ""
		}
		all = all.Union(names)
	}
	return all, "spec.template.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
}

// termNodes are the nodes one required term lets in by name or hostname,
// nil when it names none.
func termNodes(t corev1.NodeSelectorTerm) sets.Set[string] {
	var names sets.Set[string]
	narrow := func(values []string) {
		if names == nil {
			names = sets.New(values...)
		} else {
			names = names.Intersection(sets.New(values...))
		}
	}
	for _, r := range t.MatchFields {
		if r.Key == nodeNameField && r.Operator == corev1.NodeSelectorOpIn {
			narrow(r.Values)
		}
	}
	for _, r := range t.MatchExpressions {
		if r.Key == hostnameLabel && r.Operator == corev1.NodeSelectorOpIn {
			narrow(r.Values)
		}
	}
	return names
}

// retriesPerIndex is how many times one index may be retried, and the
// field that says so: backoffLimitPerIndex, else backoffLimit (every
// failure may be the same index's).
func retriesPerIndex(job *ibjv1.IndexedBatchJob) (int32, string) {
	if l := job.Spec.BackoffLimitPerIndex; l != nil {
		return *l, "spec.backoffLimitPerIndex"
	}
	return ptr.Deref(job.Spec.BackoffLimit, defaultBackoffLimit), "spec.backoffLimit"
}
