package podbuild

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// Mutations names what admission changed of what the operator writes and
// relies on, and passes over what a cluster adds: a sidecar, defaults, a
// toleration, a node selector, labels of its own.
func TestMutationsNameWhatTheOperatorReliesOn(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("uid-1").Completions(4).BackoffLimitPerIndex(2).
		PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).
		RetryInPlace(0).RetryOnOOMKilled(150, "2Gi").
		Limits(corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}).
		NodeAvoidance(ibjv1.NodeAvoidanceRequired, 0).Obj()
	want := New(job, Spec{Index: 2, Attempt: 1, Failures: 1, Avoid: []string{"node-a", "node-b"}})
	cases := []struct {
		name   string
		mutate func(*corev1.Pod)
		want   []Mutation
	}{
		{"as asked for", func(*corev1.Pod) {}, nil},
		{"what a cluster adds passes", func(p *corev1.Pod) {
			p.Labels["team"] = "ml"
			p.Annotations["sidecar.istio.io/status"] = "injected"
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "istio-proxy", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)})
			p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: "gpu", Operator: corev1.TolerationOpExists})
			p.Spec.NodeSelector = map[string]string{"pool": "batch"}
			p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
			p.Finalizers = append(p.Finalizers, "example.com/audit")
		}, nil},
		{"a stripped label", func(p *corev1.Pod) { delete(p.Labels, ibjv1.JobNameLabel) },
			[]Mutation{{"metadata.labels[" + ibjv1.JobNameLabel + "]", "was removed"}}},
		{"a rewritten annotation", func(p *corev1.Pod) { p.Annotations[ibjv1.AttemptAnnotation] = "0" },
			[]Mutation{{"metadata.annotations[" + ibjv1.AttemptAnnotation + `]`, `was changed from "1" to "0"`}}},
		{"a lost finalizer", func(p *corev1.Pod) { p.Finalizers = nil },
			[]Mutation{{"metadata.finalizers", "lost " + ibjv1.TrackingFinalizer}, {"metadata.finalizers", "lost " + ibjv1.IndexRetryFinalizer}}},
		{"a lost controller reference", func(p *corev1.Pod) { p.OwnerReferences = nil },
			[]Mutation{{"metadata.ownerReferences", "lost the controller reference to IndexedBatchJob a"}}},
		{"dropped restart rules", func(p *corev1.Pod) { p.Spec.Containers[0].RestartPolicyRules = nil },
			[]Mutation{{"spec.containers[main].restartPolicyRules", "was changed"}}},
		{"capped memory", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("512Mi")
		},
			[]Mutation{{"spec.containers[main].resources.limits.memory", "was changed from 1Gi to 512Mi"}}},
		{"a removed container", func(p *corev1.Pod) { p.Spec.Containers = nil },
			[]Mutation{{"spec.containers[main]", "was removed"}}},
		{"a replaced node affinity", func(p *corev1.Pod) { p.Spec.Affinity = nil },
			[]Mutation{{"spec.affinity.nodeAffinity", "lost the match that keeps the pod off the nodes it avoids"}}},
		{"one avoided node dropped of two", func(p *corev1.Pod) {
			term := &p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0]
			term.MatchFields = term.MatchFields[1:]
		}, []Mutation{{"spec.affinity.nodeAffinity", "lost the match that keeps the pod off the nodes it avoids"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := want.DeepCopy()
			tc.mutate(got)
			if diff := cmp.Diff(tc.want, Mutations(want, got, true)); diff != "" {
				t.Errorf("Mutations (-want +got):\n%s", diff)
			}
		})
	}
	// Without the spec (the create's answer was the metadata only), the
	// spec is not compared.
	got := want.DeepCopy()
	got.Spec.Containers = nil
	if m := Mutations(want, got, false); m != nil {
		t.Errorf("Mutations without the spec = %v, want none", m)
	}
}

// NeedsSpec: only a job whose pods carry something of the operator's in
// their spec needs the create's answer to hold the spec.
func TestNeedsSpec(t *testing.T) {
	plain := harness.MakeIndexedBatchJob("a", "ns").Obj()
	if NeedsSpec(plain) {
		t.Error("a plain job needs the spec")
	}
	for name, job := range map[string]*ibjv1.IndexedBatchJob{
		"OOM raise":      harness.MakeIndexedBatchJob("a", "ns").RetryOnOOMKilled(150, "2Gi").Obj(),
		"node avoidance": harness.MakeIndexedBatchJob("a", "ns").NodeAvoidance(ibjv1.NodeAvoidancePreferred, 0).Obj(),
		"retry InPlace": harness.MakeIndexedBatchJob("a", "ns").
			PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "main", batchv1.PodFailurePolicyOnExitCodesOpIn, 3)).RetryInPlace(0).Obj(),
	} {
		if !NeedsSpec(job) {
			t.Errorf("a job with %s does not need the spec", name)
		}
	}
}
