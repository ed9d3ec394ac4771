package podbuild

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// Mutation is one change admission made to a pod that the operator relies
// on: Field is the pod's field (metadata.labels[...], spec.containers[...]
// ...), Change what became of it.
type Mutation struct {
	Field  string
	Change string
}

func (m Mutation) String() string { return m.Field + " " + m.Change }

// NeedsSpec says whether Mutations must see the created pod's spec for a
// pod of job: the job's pods carry what the operator writes into the spec
// and relies on (container restart rules of retry InPlace, memory raised
// after OOM kills, the PodGroup's scheduling group, the nodes avoided). Without
// it, the create's answer may be the pod's metadata only.
func NeedsSpec(job *ibjv1.IndexedBatchJob) bool {
	rr := job.Spec.RetryResources
	return HasRetryInPlace(job) || (rr != nil && rr.OnOOMKilled != nil) || PodGroupName(job) != nil || job.Spec.NodeAvoidance != nil
}

// Mutations compares a pod as the API server created it (got) with the
// pod the operator asked for (want, from New), in what the operator relies
// on: the labels and annotations it writes (it finds, counts and numbers
// its pods by them), its finalizers (a result is counted before the pod
// may go), its controller reference, and, with spec (NeedsSpec), what it
// writes into the spec. Anything else admission may add or change (a
// sidecar, defaults, tolerations, a node selector) is the cluster's
// business and passes. None when got is what was asked for.
func Mutations(want, got *corev1.Pod, spec bool) []Mutation {
	var out []Mutation
	for _, key := range ibjv1.ReservedPodLabels {
		out = appendKey(out, "metadata.labels", key, want.Labels, got.Labels)
	}
	for _, key := range ibjv1.ReservedPodAnnotations {
		out = appendKey(out, "metadata.annotations", key, want.Annotations, got.Annotations)
	}
	for _, f := range want.Finalizers {
		if !slices.Contains(got.Finalizers, f) {
			out = append(out, Mutation{"metadata.finalizers", fmt.Sprintf("lost %s", f)})
		}
	}
	if w := metav1.GetControllerOf(want); w != nil {
		if g := metav1.GetControllerOf(got); g == nil || g.UID != w.UID {
			out = append(out, Mutation{"metadata.ownerReferences", fmt.Sprintf("lost the controller reference to %s %s", w.Kind, w.Name)})
		}
	}
	if spec {
		out = append(out, specMutations(&want.Spec, &got.Spec)...)
	}
	return out
}

// appendKey notes a key of the operator's that got lost or changed.
func appendKey(out []Mutation, field, key string, want, got map[string]string) []Mutation {
	w, ok := want[key]
	if !ok {
		return out
	}
	field = fmt.Sprintf("%s[%s]", field, key)
	switch g, kept := got[key]; {
	case !kept:
		return append(out, Mutation{field, "was removed"})
	case g != w:
		return append(out, Mutation{field, fmt.Sprintf("was changed from %q to %q", w, g)})
	}
	return out
}

// specMutations compares what New writes into the spec: each container's
// restart policy and rules (retry InPlace) and memory (an OOM raise), the
// scheduling group (spec.scheduling) and the node affinity (nodeAvoidance). A
// container admission added (a sidecar) is not the template's and is not
// compared; one that admission removed is.
func specMutations(want, got *corev1.PodSpec) []Mutation {
	var out []Mutation
	for _, lists := range []struct {
		field     string
		want, got []corev1.Container
	}{
		{"spec.initContainers", want.InitContainers, got.InitContainers},
		{"spec.containers", want.Containers, got.Containers},
	} {
		for _, w := range lists.want {
			i := slices.IndexFunc(lists.got, func(c corev1.Container) bool { return c.Name == w.Name })
			field := fmt.Sprintf("%s[%s]", lists.field, w.Name)
			if i < 0 {
				out = append(out, Mutation{field, "was removed"})
				continue
			}
			g := lists.got[i]
			if !equality.Semantic.DeepEqual(w.RestartPolicyRules, g.RestartPolicyRules) || (w.RestartPolicy != nil && !equality.Semantic.DeepEqual(w.RestartPolicy, g.RestartPolicy)) {
				out = append(out, Mutation{field + ".restartPolicyRules", "was changed"})
			}
			for _, r := range []struct {
				field     string
				want, got corev1.ResourceList
			}{{"limits", w.Resources.Limits, g.Resources.Limits}, {"requests", w.Resources.Requests, g.Resources.Requests}} {
				wq, ok := r.want[corev1.ResourceMemory]
				if gq := r.got[corev1.ResourceMemory]; ok && wq.Cmp(gq) != 0 {
					out = append(out, Mutation{fmt.Sprintf("%s.resources.%s.memory", field, r.field), fmt.Sprintf("was changed from %s to %s", wq.String(), gq.String())})
				}
			}
		}
	}
	if want.SchedulingGroup != nil && !equality.Semantic.DeepEqual(want.SchedulingGroup, got.SchedulingGroup) {
		out = append(out, Mutation{"spec.schedulingGroup", "was changed"})
	}
	if nodes := avoidedBy(want); len(nodes) > 0 && !slices.Equal(nodes, avoidedBy(got)) {
		out = append(out, Mutation{"spec.affinity.nodeAffinity", "lost the match that keeps the pod off the nodes it avoids"})
	}
	return out
}

// avoidedBy reads the nodes a pod's affinity avoids by name (avoidNodes):
// the values of the metadata.name NotIn matches of its first required
// term, else of its last preferred term.
func avoidedBy(spec *corev1.PodSpec) []string {
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	find := func(reqs []corev1.NodeSelectorRequirement) []string {
		var nodes []string
		for _, r := range reqs {
			if r.Key == nodeNameField && r.Operator == corev1.NodeSelectorOpNotIn {
				nodes = append(nodes, r.Values...)
			}
		}
		return nodes
	}
	if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil && len(r.NodeSelectorTerms) > 0 {
		if v := find(r.NodeSelectorTerms[0].MatchFields); v != nil {
			return v
		}
	}
	if p := a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution; len(p) > 0 {
		return find(p[len(p)-1].Preference.MatchFields)
	}
	return nil
}
