package controller

import (
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// testNow is the fixed "now" of every unit test: no test reads a real clock.
var testNow = time.Date(2026, time.March, 1, 12, 0, 0, 0, time.UTC)

// podWrapper builds pods as the controller makes them (newPod), then lets a
// test play the kubelet and the API server on them.
type podWrapper struct {
	pod *corev1.Pod
}

// makePod is the pod the controller creates for an index's first attempt.
func makePod(job *ibjv1.IndexedBatchJob, index int32) *podWrapper {
	return makePodFor(job, podToCreate{index: index})
}

// makePodFor is the pod the controller creates for c, with a UID derived
// from its (unique) name and created an hour before testNow, pending.
func makePodFor(job *ibjv1.IndexedBatchJob, c podToCreate) *podWrapper {
	pod := newPod(job, c)
	pod.UID = types.UID("uid-" + pod.Name)
	pod.CreationTimestamp = metav1.NewTime(testNow.Add(-time.Hour))
	pod.Status.Phase = corev1.PodPending
	return &podWrapper{pod: pod}
}

// obj is the pod as the controller's cache keeps it.
func (w *podWrapper) obj() *cachedPod { return newCachedPod(w.pod) }

// api is the pod as the API server holds it.
func (w *podWrapper) api() *corev1.Pod { return w.pod }

func (w *podWrapper) uid(uid types.UID) *podWrapper {
	w.pod.UID = uid
	return w
}

// running: scheduled, its containers started.
func (w *podWrapper) running() *podWrapper {
	w.pod.Status.Phase = corev1.PodRunning
	w.pod.Status.ContainerStatuses = nil
	for _, c := range w.pod.Spec.Containers {
		w.pod.Status.ContainerStatuses = append(w.pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:  c.Name,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(testNow.Add(-time.Hour))}},
		})
	}
	return w
}

func (w *podWrapper) ready() *podWrapper {
	w.running()
	return w.condition(corev1.PodReady, corev1.ConditionTrue)
}

// succeededAt: every container exited 0 at t.
func (w *podWrapper) succeededAt(t time.Time) *podWrapper {
	w.pod.Status.Phase = corev1.PodSucceeded
	w.pod.Status.ContainerStatuses = nil
	for _, c := range w.pod.Spec.Containers {
		w.pod.Status.ContainerStatuses = append(w.pod.Status.ContainerStatuses, terminated(c.Name, 0, t))
	}
	return w
}

// failedAt: the first container exited with code at t, the others with 0.
func (w *podWrapper) failedAt(t time.Time, code int32) *podWrapper {
	w.pod.Status.Phase = corev1.PodFailed
	w.pod.Status.ContainerStatuses = nil
	for i, c := range w.pod.Spec.Containers {
		exit := int32(0)
		if i == 0 {
			exit = code
		}
		w.pod.Status.ContainerStatuses = append(w.pod.Status.ContainerStatuses, terminated(c.Name, exit, t))
	}
	return w
}

// failedWithoutStatus: phase Failed with no container status, as a pod the
// kubelet rejected or a pod GC'd from a lost node.
func (w *podWrapper) failedWithoutStatus() *podWrapper {
	w.pod.Status.Phase = corev1.PodFailed
	w.pod.Status.ContainerStatuses = nil
	return w
}

func (w *podWrapper) initFailedAt(t time.Time, name string, code int32) *podWrapper {
	w.pod.Status.Phase = corev1.PodFailed
	w.pod.Status.InitContainerStatuses = append(w.pod.Status.InitContainerStatuses, terminated(name, code, t))
	return w
}

// containerExit sets (or adds) a terminated status of the named container.
func (w *podWrapper) containerExit(name string, code int32, t time.Time) *podWrapper {
	for i := range w.pod.Status.ContainerStatuses {
		if w.pod.Status.ContainerStatuses[i].Name == name {
			w.pod.Status.ContainerStatuses[i] = terminated(name, code, t)
			return w
		}
	}
	w.pod.Status.ContainerStatuses = append(w.pod.Status.ContainerStatuses, terminated(name, code, t))
	return w
}

func (w *podWrapper) deletedAt(t time.Time) *podWrapper {
	w.pod.DeletionTimestamp = &metav1.Time{Time: t}
	return w
}

func (w *podWrapper) withoutFinalizer() *podWrapper {
	w.pod.Finalizers = nil
	return w
}

// discarded is what the reconciler does to a pod it strips: finalizer gone,
// discarded annotation set, in one patch.
func (w *podWrapper) discarded() *podWrapper {
	w.pod.Finalizers = nil
	w.pod.Annotations[discardedAnnotation] = "true"
	return w
}

func (w *podWrapper) condition(typ corev1.PodConditionType, status corev1.ConditionStatus) *podWrapper {
	w.pod.Status.Conditions = append(w.pod.Status.Conditions, corev1.PodCondition{
		Type: typ, Status: status, LastTransitionTime: metav1.NewTime(testNow.Add(-time.Hour)),
	})
	return w
}

func (w *podWrapper) label(key, value string) *podWrapper {
	w.pod.Labels[key] = value
	return w
}

func (w *podWrapper) annotation(key, value string) *podWrapper {
	w.pod.Annotations[key] = value
	return w
}

func terminated(name string, code int32, t time.Time) corev1.ContainerStatus {
	return corev1.ContainerStatus{
		Name: name,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode:   code,
			FinishedAt: metav1.NewTime(t),
		}},
	}
}

func TestNewPodCarriesIndexIdentity(t *testing.T) {
	job := harness.MakeIndexedBatchJob("train", "ns").UID("job-uid").Completions(8).
		Subdomain("workers").PodLabel("app", "train").PodAnnotation("team", "ml").Obj()

	pod := newPod(job, podToCreate{index: 3, attempt: 2})

	if pod.Name != "train-3-2" || pod.Namespace != "ns" {
		t.Errorf("name = %s/%s, want ns/train-3-2 (deterministic per index and attempt)", pod.Namespace, pod.Name)
	}
	for key, want := range map[string]string{
		ibjv1.CompletionIndexLabel: "3",
		ibjv1.JobNameLabel:         "train",
		ibjv1.ControllerUIDLabel:   "job-uid",
		"app":                      "train",
	} {
		if got := pod.Labels[key]; got != want {
			t.Errorf("label %s = %q, want %q", key, got, want)
		}
	}
	if got := pod.Annotations[ibjv1.CompletionIndexLabel]; got != "3" {
		t.Errorf("index annotation = %q, want 3", got)
	}
	if got := pod.Annotations["team"]; got != "ml" {
		t.Errorf("template annotation team = %q, want ml", got)
	}
	if pod.Spec.Hostname != "train-3" {
		t.Errorf("hostname = %q, want train-3", pod.Spec.Hostname)
	}
	if pod.Spec.Subdomain != "workers" {
		t.Errorf("subdomain = %q, want the template's workers", pod.Spec.Subdomain)
	}
	ref := metav1.GetControllerOf(pod)
	if ref == nil || ref.UID != "job-uid" || ref.Kind != "IndexedBatchJob" || ref.Name != "train" ||
		ref.APIVersion != ibjv1.GroupVersion.String() || ref.BlockOwnerDeletion == nil || !*ref.BlockOwnerDeletion {
		t.Errorf("controller owner reference = %+v, want the job with controller=true", ref)
	}
	cached := newCachedPod(pod)
	if !hasTrackingFinalizer(cached) {
		t.Errorf("finalizers = %v, want %s", pod.Finalizers, ibjv1.TrackingFinalizer)
	}
	if !cached.indexOK || cached.index != 3 {
		t.Errorf("index = %d, %v; want 3, true", cached.index, cached.indexOK)
	}
	if cached.attempt != 2 {
		t.Errorf("attempt = %d, want 2", cached.attempt)
	}
}

func TestNewPodDoesNotAliasTheTemplate(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(2).PodLabel("app", "x").Obj()
	pod := newPod(job, podToCreate{index: 1})
	pod.Labels["app"] = "changed"
	pod.Spec.Containers[0].Image = "changed"
	if job.Spec.Template.Labels["app"] != "x" || job.Spec.Template.Spec.Containers[0].Image != harness.DefaultImage {
		t.Errorf("newPod shares maps or slices with the job's template")
	}
	if _, ok := job.Spec.Template.Labels[ibjv1.CompletionIndexLabel]; ok {
		t.Errorf("newPod wrote its labels into the job's template")
	}
}

func TestNewPodPutsIndexEnvFirstInEveryContainer(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Completions(8).
		InitContainer("setup").Container("sidecar").
		Env("RANK", "$(JOB_COMPLETION_INDEX)").
		// A template value for JOB_COMPLETION_INDEX is replaced, not kept twice.
		Env(ibjv1.CompletionIndexEnvName, "stale").Obj()

	pod := newPod(job, podToCreate{index: 5})

	all := append(append([]corev1.Container{}, pod.Spec.InitContainers...), pod.Spec.Containers...)
	if len(all) != 3 {
		t.Fatalf("got %d containers, want 3", len(all))
	}
	for _, c := range all {
		want := []corev1.EnvVar{{Name: ibjv1.CompletionIndexEnvName, Value: "5"}, {Name: "RANK", Value: "$(JOB_COMPLETION_INDEX)"}}
		if len(c.Env) != len(want) || c.Env[0] != want[0] || c.Env[1] != want[1] {
			t.Errorf("container %s env = %v, want %v", c.Name, c.Env, want)
		}
	}
}

func TestNewPodFailureCountAnnotationsOnlyWithBackoffLimitPerIndex(t *testing.T) {
	cases := []struct {
		name        string
		job         *ibjv1.IndexedBatchJob
		wantPresent bool
	}{
		{"without backoffLimitPerIndex", harness.MakeIndexedBatchJob("a", "ns").Completions(4).Obj(), false},
		{"with backoffLimitPerIndex", harness.MakeIndexedBatchJob("a", "ns").Completions(4).BackoffLimitPerIndex(2).Obj(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := newPod(tc.job, podToCreate{index: 1, attempt: 4, failures: 3, ignored: 1})
			failures, ok1 := pod.Annotations[ibjv1.IndexFailureCountAnnotation]
			ignored, ok2 := pod.Annotations[ibjv1.IndexIgnoredFailureCountAnnotation]
			if ok1 != tc.wantPresent || ok2 != tc.wantPresent {
				t.Fatalf("failure-count annotations present = %v/%v, want %v", ok1, ok2, tc.wantPresent)
			}
			if tc.wantPresent && (failures != "3" || ignored != "1") {
				t.Errorf("failure counts = %s/%s, want 3/1", failures, ignored)
			}
		})
	}
}

func TestPodStateHelpers(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	cases := []struct {
		name                          string
		pod                           *cachedPod
		active, terminating, finished bool
	}{
		{"pending", makePod(job, 0).obj(), true, false, false},
		{"running", makePod(job, 0).running().obj(), true, false, false},
		{"deleted while running", makePod(job, 0).running().deletedAt(testNow).obj(), false, true, false},
		{"succeeded", makePod(job, 0).succeededAt(testNow).obj(), false, false, true},
		{"failed and deleted", makePod(job, 0).failedAt(testNow, 1).deletedAt(testNow).obj(), false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if isActive(tc.pod) != tc.active || isTerminating(tc.pod) != tc.terminating || isFinished(tc.pod) != tc.finished {
				t.Errorf("active/terminating/finished = %v/%v/%v, want %v/%v/%v",
					isActive(tc.pod), isTerminating(tc.pod), isFinished(tc.pod), tc.active, tc.terminating, tc.finished)
			}
		})
	}
}

func TestFinishTimePrefersLatestContainerTermination(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").InitContainer("setup").Container("sidecar").Obj()
	early, late := testNow.Add(-time.Minute), testNow.Add(-10*time.Second)
	cases := []struct {
		name string
		pod  *cachedPod
		want time.Time
	}{
		{"latest container", makePod(job, 0).failedAt(early, 1).containerExit("sidecar", 0, late).obj(), late},
		{"init container", makePod(job, 0).initFailedAt(late, "setup", 2).obj(), late},
		{"ready condition without container status", makePod(job, 0).failedWithoutStatus().condition(corev1.PodReady, corev1.ConditionFalse).obj(), testNow.Add(-time.Hour)},
		{"deletion without status", makePod(job, 0).deletedAt(early).obj(), early},
		{"deletion of a pod still Ready", makePod(job, 0).condition(corev1.PodReady, corev1.ConditionTrue).deletedAt(early).obj(), early},
		{"creation as the last resort", makePod(job, 0).failedWithoutStatus().obj(), testNow.Add(-time.Hour)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.pod.finishedAt; !got.Equal(tc.want) {
				t.Errorf("finishTime = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCountsAsFailedFollowsReplacementPolicy(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").Obj()
	cases := []struct {
		name       string
		pod        *cachedPod
		onlyFailed bool
		want       bool
	}{
		{"failed", makePod(job, 0).failedAt(testNow, 1).obj(), true, true},
		{"terminating, TerminatingOrFailed", makePod(job, 0).running().deletedAt(testNow).obj(), false, true},
		{"terminating, Failed", makePod(job, 0).running().deletedAt(testNow).obj(), true, false},
		{"succeeded while terminating", makePod(job, 0).succeededAt(testNow).deletedAt(testNow).obj(), false, false},
		{"discarded", makePod(job, 0).failedAt(testNow, 1).discarded().obj(), false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			policy := batchv1.TerminatingOrFailed
			if tc.onlyFailed {
				policy = batchv1.Failed
			}
			if got := classifyFailure(harness.MakeIndexedBatchJob("a", "ns").PodReplacementPolicy(policy).Obj(), tc.pod).Failed; got != tc.want {
				t.Errorf("failed = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestReplacementPolicyDefaultsToFailedWithPodFailurePolicy(t *testing.T) {
	base := harness.MakeIndexedBatchJob("a", "ns")
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want bool
	}{
		{"default", base.Clone().Obj(), false},
		{"TerminatingOrFailed", base.Clone().PodReplacementPolicy(batchv1.TerminatingOrFailed).Obj(), false},
		{"Failed", base.Clone().PodReplacementPolicy(batchv1.Failed).Obj(), true},
		{"pod failure policy", base.Clone().PodFailurePolicy().Obj(), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := onlyReplaceFailed(tc.job); got != tc.want {
				t.Errorf("onlyReplaceFailed = %v, want %v", got, tc.want)
			}
		})
	}
}
