package harness

import (
	"context"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

const (
	// killedExitCode is what a kubelet reports for a container it killed
	// (SIGKILL).
	killedExitCode int32 = 137
	// kubeletTick is how often a Kubelet lists its job's pods.
	kubeletTick = 50 * time.Millisecond
)

// PodOutcome is how a Kubelet ends a pod that has run its time.
type PodOutcome struct {
	// ExitCode ends every container with this code: phase Succeeded for 0,
	// Failed otherwise.
	ExitCode int32
	// Disrupted fails the pod as an eviction does (see DisruptPod); it
	// wins over the other fields.
	Disrupted bool
	// StayRunning keeps the pod running for now: the Kubelet asks again on
	// its next pass, so a test can let the pod end later.
	StayRunning bool
}

// KubeletOptions say how a Kubelet ends the pods it runs.
type KubeletOptions struct {
	// Outcome decides how the pod of an index ends, given its attempt (0
	// for the first pod of the index). It is asked on every pass once the
	// pod has run for RunFor, until it says anything but StayRunning, from
	// the Kubelet's own goroutine. Nil: every pod succeeds.
	Outcome func(index, attempt int) PodOutcome
	// RunFor is how long a pod stays Running before Outcome is asked;
	// zero ends it on the pass after it started.
	RunFor time.Duration
}

// Kubelet plays the node agent for the pods of one job, on a control plane
// without one (envtest): it binds new pods, marks them Running and Ready,
// ends them as its options say, and kills a terminating pod (phase Failed,
// then the final delete), as a kubelet would after stopping it. Its
// PodWatch records every listing, so a test can check what ran.
type Kubelet struct {
	*PodWatch
	c    client.Client
	opts KubeletOptions

	mu              sync.Mutex
	holdTerminating bool
	started         map[types.UID]time.Time // when each running pod started
	finished        int
}

// StartKubelet starts a Kubelet for the pods of job in namespace, writing
// through c. Stop it when the test ends.
func StartKubelet(c client.Client, namespace, job string, opts KubeletOptions) *Kubelet {
	k := newKubelet(c, opts)
	k.PodWatch = startPodWatch(c, namespace, job, kubeletTick, k.step)
	return k
}

// newKubelet is a Kubelet that is not running yet.
func newKubelet(c client.Client, opts KubeletOptions) *Kubelet {
	if opts.Outcome == nil {
		opts.Outcome = func(int, int) PodOutcome { return PodOutcome{} }
	}
	return &Kubelet{c: c, opts: opts, started: map[types.UID]time.Time{}}
}

// HoldTerminating keeps terminating pods terminating, as a slow node would,
// until called with false.
func (k *Kubelet) HoldTerminating(hold bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holdTerminating = hold
}

// Finished is how many pods the Kubelet has ended as Outcome said; pods it
// killed because they were deleted are not counted.
func (k *Kubelet) Finished() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.finished
}

// step moves each pod of one listing a step on: a failed write is left for
// the next pass, which sees the pod as it is then.
func (k *Kubelet) step(ctx context.Context, pods []corev1.Pod) {
	k.mu.Lock()
	hold := k.holdTerminating
	k.mu.Unlock()
	for i := range pods {
		p := &pods[i]
		if ctx.Err() != nil {
			return
		}
		switch {
		case p.DeletionTimestamp != nil:
			if !hold {
				_ = KillPod(ctx, k.c, p)
			}
		case p.Spec.NodeName == "":
			_ = BindPod(ctx, k.c, p)
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			if RunPod(ctx, k.c, p) == nil {
				k.markStarted(p.UID)
			}
		case p.Status.Phase == corev1.PodRunning:
			k.end(ctx, p)
		}
	}
}

// markStarted notes when a pod started running, unless already noted, and
// returns that time.
func (k *Kubelet) markStarted(uid types.UID) time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	started, ok := k.started[uid]
	if !ok {
		started = time.Now()
		k.started[uid] = started
	}
	return started
}

// end ends a running pod as Outcome says, once it has run for RunFor. A
// pod someone else marked Running starts its time when first seen.
func (k *Kubelet) end(ctx context.Context, p *corev1.Pod) {
	if time.Since(k.markStarted(p.UID)) < k.opts.RunFor {
		return
	}
	// The operator writes both numbers; a pod without them (a stray a test
	// made) counts as index 0, attempt 0.
	index, _ := strconv.Atoi(p.Labels[v1alpha1.CompletionIndexLabel])
	attempt, _ := strconv.Atoi(p.Annotations[v1alpha1.AttemptAnnotation])
	var err error
	switch o := k.opts.Outcome(index, attempt); {
	case o.Disrupted:
		err = DisruptPod(ctx, k.c, p)
	case o.StayRunning:
		return
	default:
		err = FinishPod(ctx, k.c, p, o.ExitCode)
	}
	if err == nil {
		k.mu.Lock()
		k.finished++
		delete(k.started, p.UID)
		k.mu.Unlock()
	}
}

// The pod lifecycle a kubelet drives, for suites that run on a control plane
// without one (envtest). Each step writes what a kubelet would write; the
// Kubelet above retries a step that failed on its next pass.

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

// DisruptPod fails a running pod as an eviction does: condition
// DisruptionTarget (reason EvictionByEvictionAPI), then every container
// killed (exit code 137).
func DisruptPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.Now()})
	return FinishPod(ctx, c, p, killedExitCode)
}

// KillPod ends a terminating pod the way a kubelet does: phase Failed (exit
// code 137) unless it already finished, then the final delete with no grace.
func KillPod(ctx context.Context, c client.Client, p *corev1.Pod) error {
	if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
		if err := FinishPod(ctx, c, p, killedExitCode); err != nil {
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
