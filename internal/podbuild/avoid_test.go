package podbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// nameNotIn is the matches that keep a pod off nodes: one a node, since
// the API server takes one value in a NotIn match on a field.
func nameNotIn(nodes ...string) []corev1.NodeSelectorRequirement {
	reqs := make([]corev1.NodeSelectorRequirement, len(nodes))
	for i, n := range nodes {
		reqs[i] = corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: []string{n}}
	}
	return reqs
}

// The nodes a pod avoids go into its node affinity: under Required into
// every required term the template has (or one of its own), under
// Preferred as a preferred term of weight 100 beside the template's; the
// template's own terms are kept, and a job without nodeAvoidance, or a pod
// that avoids nothing, gets the template's affinity unchanged.
func TestAvoidedNodesGoIntoTheNodeAffinity(t *testing.T) {
	zoneTerm := func(zone string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}}}
	}
	withTerms := func(job *ibjv1.IndexedBatchJob, terms ...corev1.NodeSelectorTerm) *ibjv1.IndexedBatchJob {
		job.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: terms},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: zoneTerm("z9")}},
		}}
		return job
	}
	base := func() *harness.JobWrapper { return harness.MakeIndexedBatchJob("a", "ns").Completions(2) }
	cases := map[string]struct {
		job   *ibjv1.IndexedBatchJob
		avoid []string
		want  *corev1.Affinity
	}{
		"no nodeAvoidance": {job: base().Obj(), avoid: []string{"n1"}},
		"nothing to avoid": {job: base().NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj()},
		"required, no template affinity": {
			job: base().NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj(), avoid: []string{"n1", "n2"},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
				NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: nameNotIn("n1", "n2")}}}}},
		},
		"required, into each of the template's terms": {
			job:   withTerms(base().NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj(), zoneTerm("z1"), zoneTerm("z2")),
			avoid: []string{"n1", "n2"},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchExpressions: zoneTerm("z1").MatchExpressions, MatchFields: nameNotIn("n1", "n2")},
					{MatchExpressions: zoneTerm("z2").MatchExpressions, MatchFields: nameNotIn("n1", "n2")},
				}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: zoneTerm("z9")}},
			}},
		},
		"preferred, beside the template's preferences": {
			job:   withTerms(base().NodeAvoidance(ibjv1.NodeAvoidancePreferred, 0).Obj(), zoneTerm("z1")),
			avoid: []string{"n1", "n2"},
			want: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{zoneTerm("z1")}},
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
					{Weight: 5, Preference: zoneTerm("z9")},
					{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchFields: nameNotIn("n1", "n2")}},
				},
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want := tc.want
			if want == nil {
				want = tc.job.Spec.Template.Spec.Affinity
			}
			pod := New(tc.job, Spec{Index: 1, Attempt: 1, Avoid: tc.avoid})
			if diff := cmp.Diff(want, pod.Spec.Affinity); diff != "" {
				t.Errorf("affinity (-want +got):\n%s", diff)
			}
			if tc.job.Spec.Template.Spec.Affinity != nil && len(tc.avoid) > 0 &&
				cmp.Equal(tc.job.Spec.Template.Spec.Affinity, pod.Spec.Affinity) {
				t.Error("the template's affinity was changed in place")
			}
		})
	}
}
