package kwokcluster

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
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

// TestSimulatedKubeletsRestartAContainerInPlaceByItsRestartRules: the
// demo's nodes run the pods of a job with a retry InPlace rule as a
// kubelet does. The operator's pod of a failing index, whose exit code
// that rule takes, keeps running: its container restarts in place, again
// and again as it fails each run, and the pod neither fails nor goes. The
// same job with retry NewPod gets the pod failed at its first exit.
func TestSimulatedKubeletsRestartAContainerInPlaceByItsRestartRules(t *testing.T) {
	const exitCode = 75
	job := func(name string) *harness.JobWrapper {
		return harness.MakeIndexedBatchJob(name, "ns").Completions(2).Parallelism(2).BackoffLimitPerIndex(2).
			PodFailurePolicy(harness.OnExitCodes(batchv1.PodFailurePolicyActionCount, "", batchv1.PodFailurePolicyOnExitCodesOpIn, exitCode)).
			PodAnnotation(FailIndexesAnnotation, "1").PodAnnotation(ExitCodeAnnotation, strconv.Itoa(exitCode)).
			PodAnnotation(FailDurationAnnotation, "20ms").PodAnnotation(DurationAnnotation, Forever)
	}
	// pod is the operator's first pod of index 1, bound to a node.
	pod := func(job *ibjv1.IndexedBatchJob) *corev1.Pod {
		p := podbuild.First(job, 1)
		p.UID, p.Spec.NodeName, p.Status.Phase = types.UID(p.Name), "node-0", corev1.PodPending
		return p
	}
	inPlace, newPod := pod(job("in-place").RetryInPlace(0).Obj()), pod(job("new-pod").Obj())
	if len(inPlace.Spec.Containers[0].RestartPolicyRules) == 0 {
		t.Fatal("the operator wrote no container restart rule for retry InPlace")
	}
	cs := fake.NewClientset(inPlace, newPod)
	sim := podsim.New(simulatedKubeletOptions(cs))
	if err := sim.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sim.Stop)

	get := func(p *corev1.Pod) *corev1.Pod {
		got, err := cs.CoreV1().Pods(p.Namespace).Get(t.Context(), p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s: %v", p.Name, err)
		}
		return got
	}
	var status corev1.PodStatus
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		status = get(inPlace).Status
		if status.Phase != corev1.PodRunning && status.Phase != corev1.PodPending {
			t.Fatalf("pod %s of the retry InPlace job ended %s: its container should have restarted in place", inPlace.Name, status.Phase)
		}
		if len(status.ContainerStatuses) > 0 && status.ContainerStatuses[0].RestartCount >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: container statuses %+v, want 3 restarts in place", inPlace.Name, status.ContainerStatuses)
		}
	}
	if last := status.ContainerStatuses[0].LastTerminationState.Terminated; last == nil || last.ExitCode != exitCode {
		t.Errorf("lastState %+v, want terminated with exit code %d", status.ContainerStatuses[0].LastTerminationState, exitCode)
	}
	if got := get(newPod).Status; got.Phase != corev1.PodFailed || got.ContainerStatuses[0].RestartCount != 0 ||
		got.ContainerStatuses[0].State.Terminated == nil || got.ContainerStatuses[0].State.Terminated.ExitCode != exitCode {
		t.Errorf("pod %s of the retry NewPod job: phase %s, container statuses %+v; want Failed with exit code %d, no restart",
			newPod.Name, got.Phase, got.ContainerStatuses, exitCode)
	}
}
