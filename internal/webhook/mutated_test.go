package webhook

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// What the admission chain did to the dry-run pod: a change to what every
// pod carries alike refuses the job, naming the field under spec.template;
// a change to a per-pod value is warned of; what a cluster adds passes.
func TestMutatedAtAdmission(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(3).Obj()
	sent := podbuild.First(job, 0)
	dryRunnable(sent)
	for _, tc := range []struct {
		name        string
		mutate      func(*corev1.Pod)
		wantErr     string
		wantWarning string
	}{
		{"as sent", func(*corev1.Pod) {}, "", ""},
		{"a label of the cluster's own and a sidecar", func(p *corev1.Pod) {
			p.Labels["team"] = "ml"
			p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{Name: "istio-proxy"})
		}, "", ""},
		{"the job-name label stripped", func(p *corev1.Pod) { delete(p.Labels, ibjv1.JobNameLabel) },
			"spec.template.metadata.labels[" + ibjv1.JobNameLabel + "]: Forbidden: was removed in this job's dry-run pod, changed by the cluster's admission chain", ""},
		{"the finalizers dropped", func(p *corev1.Pod) { p.Finalizers = nil },
			"spec.template.metadata.finalizers: Forbidden: lost " + ibjv1.TrackingFinalizer, ""},
		{"the index annotation rewritten", func(p *corev1.Pod) { p.Annotations[ibjv1.CompletionIndexLabel] = "7" },
			"", `metadata.annotations[` + ibjv1.CompletionIndexLabel + `] was changed from "0" to "7"; it may do so only for some pods`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := sent.DeepCopy()
			tc.mutate(got)
			warnings, err := mutatedAtAdmission(job, sent, got, "")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			joined := strings.Join(warnings, "\n")
			if (tc.wantWarning == "") != (len(warnings) == 0) || !strings.Contains(joined, tc.wantWarning) {
				t.Errorf("warnings %q, want %q", warnings, tc.wantWarning)
			}
		})
	}
}
