package utils

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The pod lifecycle a kubelet drives, for suites that run on a control plane
// without one (envtest). Each step writes what a kubelet would write; each
// returns nil when the pod is gone or changed meanwhile, since a test
// kubelet simply retries on its next pass.

// BindPod binds the pod to a node through the binding subresource, so that
// deleting it is graceful, as on a real node.
func BindPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	return c.SubResource("binding").Create(ctx, p, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	})
}

// RunPod marks a bound pod Running and Ready, its containers running.
func RunPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	p.Status.ContainerStatuses = nil
	for _, ctr := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: ctr.Name, Image: ctr.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return c.Status().Update(ctx, p)
}

// FinishPod terminates every container with the exit code: phase Succeeded
// for 0, Failed otherwise. Conditions other than Ready (DisruptionTarget,
// say) are kept.
func FinishPod(ctx context.Context, c client.Client, p *corev1.Pod, exitCode int32) error {
	now := metav1.Now()
	p.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		p.Status.Phase = corev1.PodFailed
	}
	var conditions []corev1.PodCondition
	for _, cond := range p.Status.Conditions {
		if cond.Type != corev1.PodReady {
			conditions = append(conditions, cond)
		}
	}
	p.Status.Conditions = append(conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now})
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = false
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}}
	}
	return c.Status().Update(ctx, p)
}

// KillPod ends a terminating pod the way a kubelet does: phase Failed (exit
// code 137) unless it already finished, then the final delete with no grace.
func KillPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
		if err := FinishPod(ctx, c, p, 137); err != nil {
			return IgnoreGone(err)
		}
	}
	return IgnoreGone(c.Delete(ctx, p, client.GracePeriodSeconds(0)))
}

// IgnoreGone drops the errors of a write that lost a race: the object is
// gone, or changed since it was read.
func IgnoreGone(err error) error {
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
