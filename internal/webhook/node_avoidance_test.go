package webhook

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Required avoidance is refused, at spec.nodeAvoidance.mode with the
// reason, where a retry could be left with no node; Preferred is let
// through, with a warning where it can do nothing.
func TestNodeAvoidanceThatCouldNeverPlaceARetry(t *testing.T) {
	pinByName := func(names ...string) func(*ibjv1.IndexedBatchJob) {
		return func(job *ibjv1.IndexedBatchJob) {
			job.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
					{MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: names}}},
				}}}}
		}
	}
	pinByHostnameOrZone := func(job *ibjv1.IndexedBatchJob) {
		job.Spec.Template.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: hostnameLabel, Operator: corev1.NodeSelectorOpIn, Values: []string{"h1"}}}},
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"z"}}}},
			}}}}
	}
	cases := []struct {
		name     string
		mode     ibjv1.NodeAvoidanceMode
		edit     func(*harness.JobWrapper)
		job      func(*ibjv1.IndexedBatchJob)
		refused  string // a part of the refusal's reason, "" for none
		warnings int
	}{
		{name: "required, open template", mode: ibjv1.NodeAvoidanceRequired},
		{name: "required with nodeName", mode: ibjv1.NodeAvoidanceRequired,
			job: func(j *ibjv1.IndexedBatchJob) { j.Spec.Template.Spec.NodeName = "n1" }, refused: "binds every pod to node n1"},
		{name: "preferred with nodeName warns", mode: ibjv1.NodeAvoidancePreferred,
			job: func(j *ibjv1.IndexedBatchJob) { j.Spec.Template.Spec.NodeName = "n1" }, warnings: 1},
		{name: "required with a gang", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.Parallelism(2).GangScheduling(2) }, refused: "with spec.gangScheduling the pods are placed all or none"},
		{name: "required with spec.scheduling's gang", mode: ibjv1.NodeAvoidanceRequired,
			edit:    func(w *harness.JobWrapper) { w.Parallelism(2).Gang(0) },
			refused: "with spec.scheduling.schedulingPolicy.gang the pods are placed all or none"},
		{name: "required with spec.scheduling's basic policy, placed one by one", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.BasicScheduling().Topology("topology.kubernetes.io/zone") }},
		{name: "required with Kueue's topology", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) {
				w.PodAnnotation("kueue.x-k8s.io/podset-required-topology", "kubernetes.io/hostname")
			},
			refused: "kueue.x-k8s.io/podset-required-topology"},
		{name: "preferred with Kueue's topology warns", mode: ibjv1.NodeAvoidancePreferred,
			edit:     func(w *harness.JobWrapper) { w.PodAnnotation("kueue.x-k8s.io/podset-preferred-topology", "rack") },
			warnings: 1},
		{name: "required, hostname selector, retries left", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.BackoffLimitPerIndex(1).NodeSelector(hostnameLabel, "h1") }, refused: "pins the pods to 1 node(s) (h1)"},
		{name: "required, pinned to more nodes than retries", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.BackoffLimitPerIndex(2) }, job: pinByName("a", "b", "c")},
		{name: "required, pinned to as many nodes as retries", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.BackoffLimitPerIndex(2) }, job: pinByName("a", "b"),
			refused: "retried 2 time(s) (spec.backoffLimitPerIndex)"},
		{name: "required, pinned, no retries", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.BackoffLimitPerIndex(0) }, job: pinByName("a")},
		{name: "required, backoffLimit counts without a per-index limit", mode: ibjv1.NodeAvoidanceRequired,
			edit: func(w *harness.JobWrapper) { w.BackoffLimit(6) }, job: pinByName("a", "b"), refused: "(spec.backoffLimit)"},
		{name: "required, one term leaves other nodes open", mode: ibjv1.NodeAvoidanceRequired, job: pinByHostnameOrZone},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := harness.MakeIndexedBatchJob("a", "ns").Completions(4).NodeAvoidance(tc.mode, 0)
			if tc.edit != nil {
				tc.edit(w)
			}
			job := w.Obj()
			if tc.job != nil {
				tc.job(job)
			}
			errs := specErrors(job)
			switch {
			case tc.refused == "" && len(errs) > 0:
				t.Errorf("refused: %v", errs.ToAggregate())
			case tc.refused != "" && (len(errs) != 1 || errs[0].Field != "spec.nodeAvoidance.mode" || !strings.Contains(errs[0].Detail, tc.refused)):
				t.Errorf("errors %v, want one at spec.nodeAvoidance.mode saying %q", errs.ToAggregate(), tc.refused)
			}
			if got := nodeAvoidanceWarnings(job); len(got) != tc.warnings {
				t.Errorf("warnings %q, want %d", got, tc.warnings)
			}
		})
	}
}

// A job without nodeAvoidance is judged as before: nothing is refused for
// the template's pinning.
func TestNoNodeAvoidanceRefusesNothing(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").NodeSelector(hostnameLabel, "h1").Obj()
	job.Spec.Template.Spec.NodeName = "h1"
	if diff := cmp.Diff(0, len(nodeAvoidanceErrors(job))+len(nodeAvoidanceWarnings(job))); diff != "" {
		t.Error(diff)
	}
}
