package kwokcluster

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/podsim"
)

// The simulated kubelets end a pod as kwok's stages in
// hack/kwok/stages/pods.yaml do, by the same annotations (and
// fail-restart-attempts, which only they read).
func TestAnnotatedPlan(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ann   map[string]string
		index int
		want  podsim.Plan
	}{
		{"no annotations: 1s, success", nil, 0, podsim.Plan{Run: time.Second}},
		{"a duration", map[string]string{DurationAnnotation: "2s"}, 3, podsim.Plan{Run: 2 * time.Second}},
		{"forever", map[string]string{DurationAnnotation: Forever}, 0, podsim.Plan{Hold: true}},
		{"a failing index: exit code 1 after the duration", map[string]string{DurationAnnotation: "2s", FailIndexesAnnotation: "1,2"}, 2,
			podsim.Plan{Run: 2 * time.Second, ExitCode: 1}},
		{"an index outside the failing ones", map[string]string{FailIndexesAnnotation: "1,2"}, 3, podsim.Plan{Run: time.Second}},
		{"a range, an exit code and a fail duration", map[string]string{
			DurationAnnotation: "10s", FailIndexesAnnotation: "0, 5-7", ExitCodeAnnotation: "42", FailDurationAnnotation: "500ms"}, 6,
			podsim.Plan{Run: 500 * time.Millisecond, ExitCode: 42}},
		{"unreadable values count as unset", map[string]string{DurationAnnotation: "soon", ExitCodeAnnotation: "x", FailIndexesAnnotation: "4"}, 4,
			podsim.Plan{Run: time.Second, ExitCode: 1}},
		{"an OOM kill", map[string]string{FailIndexesAnnotation: "3", ExitCodeAnnotation: "137", ExitReasonAnnotation: "OOMKilled"}, 3,
			podsim.Plan{Run: time.Second, ExitCode: 137, OOMKilled: true}},
		{"another exit reason is an error", map[string]string{FailIndexesAnnotation: "3", ExitReasonAnnotation: "Evicted"}, 3,
			podsim.Plan{Run: time.Second, ExitCode: 1}},
		{"a pod without an index never fails", map[string]string{FailIndexesAnnotation: "0-9"}, -1, podsim.Plan{Run: time.Second}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tc.ann}}
		if got := annotatedPlan(pod, tc.index); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: plan %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestAnnotatedPlanOfAGeneration: fail-restart-attempts fails an index only
// in the generations it lists, by the pod's restart-attempt label.
func TestAnnotatedPlanOfAGeneration(t *testing.T) {
	ann := map[string]string{FailIndexesAnnotation: "2", FailRestartAttemptsAnnotation: "0"}
	for _, tc := range []struct {
		name       string
		generation string // the restart-attempt label; "" for none
		want       podsim.Plan
	}{
		{"generation 0 fails", "0", podsim.Plan{Run: time.Second, ExitCode: 1}},
		{"a pod without the label is of generation 0", "", podsim.Plan{Run: time.Second, ExitCode: 1}},
		{"generation 1 succeeds", "1", podsim.Plan{Run: time.Second}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: ann, Labels: map[string]string{}}}
		if tc.generation != "" {
			pod.Labels[ibjv1.RestartAttemptLabel] = tc.generation
		}
		if got := annotatedPlan(pod, 2); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: plan %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
