package podsim

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// What a kubelet writes into a pod's status as the pod runs and ends. The
// Simulator writes these through the API server; a test that plays the API
// server itself (a fake client) can write the same.

// MarkRunning sets pod's status to what a kubelet reports once its
// containers run: phase Running since now, Ready, every container running.
func MarkRunning(pod *corev1.Pod, now time.Time) {
	at := metav1.NewTime(now)
	pod.Status.Phase = corev1.PodRunning
	pod.Status.StartTime = &at
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: at}}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}},
		})
	}
}

// MarkTerminated sets pod's status to what a kubelet reports once every
// container exited with exitCode at now: phase Succeeded for 0, Failed
// otherwise; not Ready; each container terminated, started at the pod's
// start time (now if it has none). disrupted adds the DisruptionTarget
// condition an eviction sets (reason EvictionByEvictionAPI). Conditions
// other than Ready are kept.
func MarkTerminated(pod *corev1.Pod, exitCode int32, disrupted bool, now time.Time) {
	at := metav1.NewTime(now)
	phase, reason := corev1.PodSucceeded, "Completed"
	if exitCode != 0 {
		phase, reason = corev1.PodFailed, "Error"
	}
	if pod.Status.StartTime == nil {
		pod.Status.StartTime = &at
	}
	started := *pod.Status.StartTime
	pod.Status.Phase = phase
	var conditions []corev1.PodCondition
	for _, c := range pod.Status.Conditions {
		if c.Type != corev1.PodReady {
			conditions = append(conditions, c)
		}
	}
	if disrupted {
		conditions = append(conditions, corev1.PodCondition{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: at,
		})
	}
	pod.Status.Conditions = append(conditions, corev1.PodCondition{
		Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: at,
	})
	before := pod.Status.ContainerStatuses
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		cs := corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exitCode, Reason: reason, StartedAt: started, FinishedAt: at,
			}},
		}
		// A container restarted in place keeps its restart count and last
		// state, and its last run started when it was restarted.
		for _, b := range before {
			if b.Name == c.Name && b.RestartCount > 0 {
				cs.RestartCount, cs.LastTerminationState = b.RestartCount, b.LastTerminationState
				if r := b.State.Running; r != nil {
					cs.State.Terminated.StartedAt = r.StartedAt
				}
			}
		}
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, cs)
	}
}

// MarkOOMKilled gives every terminated container of pod the reason a
// kubelet writes when the kernel killed it for going over its memory limit
// (OOMKilled), after MarkTerminated with exit code 137.
func MarkOOMKilled(pod *corev1.Pod) {
	for i := range pod.Status.ContainerStatuses {
		if t := pod.Status.ContainerStatuses[i].State.Terminated; t != nil {
			t.Reason = "OOMKilled"
		}
	}
}

// terminal reports whether the pod has ended.
func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}

// MarkRestartedInPlace sets pod's status to what a kubelet reports once
// container (its first when empty) exited with exitCode at now and was
// restarted inside the pod by one of its restartPolicyRules: its
// restartCount one higher, its lastState that exit, running again since
// now; the pod stays Running. The pod must be running (MarkRunning).
func MarkRestartedInPlace(pod *corev1.Pod, container string, exitCode int32, now time.Time) {
	at := metav1.NewTime(now)
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		if container != "" && cs.Name != container || container == "" && i > 0 {
			continue
		}
		started := at
		if r := cs.State.Running; r != nil {
			started = r.StartedAt
		}
		cs.RestartCount++
		cs.LastTerminationState = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			ExitCode: exitCode, Reason: "Error", StartedAt: started, FinishedAt: at,
		}}
		cs.State = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: at}}
	}
}

// RestartRuleMatches reports whether a container restart rule of c (its
// restartPolicyRules, first match wins, as the kubelet reads them)
// restarts it in place after it exited with exitCode.
func RestartRuleMatches(c *corev1.Container, exitCode int32) bool {
	for _, r := range c.RestartPolicyRules {
		if r.ExitCodes == nil {
			continue
		}
		in := slices.Contains(r.ExitCodes.Values, exitCode)
		if (r.ExitCodes.Operator == corev1.ContainerRestartRuleOnExitCodesOpIn) == in {
			return r.Action == corev1.ContainerRestartRuleActionRestart
		}
	}
	return false
}
