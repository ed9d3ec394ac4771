package install_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// kubelet plays the node agent for the pods of one job, as the controller
// suite's does (test/integration/controller/kubelet_test.go): it binds new
// pods, marks them Running and Ready, and after runFor ends every container
// with exitCode(index); a terminating pod is marked Failed and removed. It
// records every pod it saw per index and the first index seen with two
// unfinished pods at once.
type kubelet struct {
	ns, job  string
	exitCode func(index int) int32
	runFor   time.Duration

	mu          sync.Mutex
	attempts    map[int]map[string]bool // index -> pod names seen
	running     map[string]time.Time    // pod -> when it was marked Running
	finished    int                     // pods this kubelet ended
	doubleIndex string
	stop        context.CancelFunc
	done        chan struct{}
}

func startKubelet(ns, job string, runFor time.Duration, exitCode func(index int) int32) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{ns: ns, job: job, exitCode: exitCode, runFor: runFor,
		attempts: map[int]map[string]bool{}, running: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(k.done)
		for ctx.Err() == nil {
			k.step(ctx)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	DeferCleanup(k.Stop)
	return k
}

// Stop stops the kubelet and waits until it has; stopping twice is fine.
func (k *kubelet) Stop() {
	k.stop()
	<-k.done
}

func (k *kubelet) step(ctx context.Context) {
	var list corev1.PodList
	if err := k8sClient.List(ctx, &list, client.InNamespace(k.ns), client.MatchingLabels{ibjv1.JobNameLabel: k.job}); err != nil {
		return // stopping, or a transient error: the next step retries
	}
	pods := list.Items
	unfinished := map[int]int{}
	k.mu.Lock()
	for _, p := range pods {
		ix, _ := strconv.Atoi(p.Labels[ibjv1.CompletionIndexLabel])
		if k.attempts[ix] == nil {
			k.attempts[ix] = map[string]bool{}
		}
		k.attempts[ix][p.Name] = true
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			if unfinished[ix]++; unfinished[ix] > 1 && k.doubleIndex == "" {
				k.doubleIndex = fmt.Sprintf("index %d at %s", ix, time.Now().Format(time.RFC3339Nano))
			}
		}
	}
	k.mu.Unlock()

	for i := range pods {
		p := &pods[i]
		if ctx.Err() != nil {
			return
		}
		switch {
		case p.DeletionTimestamp != nil:
			killPod(ctx, p)
		case p.Spec.NodeName == "":
			bindPod(ctx, p)
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			if markRunning(ctx, p) {
				k.mu.Lock()
				k.running[p.Name] = time.Now()
				k.mu.Unlock()
			}
		case p.Status.Phase == corev1.PodRunning:
			k.mu.Lock()
			started, ok := k.running[p.Name]
			k.mu.Unlock()
			if !ok || time.Since(started) < k.runFor {
				continue
			}
			ix, _ := strconv.Atoi(p.Labels[ibjv1.CompletionIndexLabel])
			if finishPod(ctx, p, k.exitCode(ix)) {
				k.mu.Lock()
				k.finished++
				k.mu.Unlock()
			}
		}
	}
}

// runsOf is how many pods the kubelet saw for an index.
func (k *kubelet) runsOf(index int) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.attempts[index])
}

// finishedPods is how many pods the kubelet has ended.
func (k *kubelet) finishedPods() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.finished
}

// doubles is the first index seen with two unfinished pods, or "".
func (k *kubelet) doubles() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.doubleIndex
}

// bindPod binds the pod to a node, so that deleting it is graceful as on a
// real node.
func bindPod(ctx context.Context, p *corev1.Pod) {
	_ = k8sClient.SubResource("binding").Create(ctx, p, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	})
}

// markRunning marks a bound pod Running and Ready, and says whether it did.
func markRunning(ctx context.Context, p *corev1.Pod) bool {
	now := metav1.Now()
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return k8sClient.Status().Update(ctx, p) == nil
}

// finishPod terminates every container with the exit code, and says whether
// it did.
func finishPod(ctx context.Context, p *corev1.Pod, exitCode int32) bool {
	now := metav1.Now()
	p.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		p.Status.Phase = corev1.PodFailed
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now}}
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = false
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}}
	}
	return k8sClient.Status().Update(ctx, p) == nil
}

// killPod ends a terminating pod the way a kubelet does: phase Failed
// (exit code 137), then the final delete with no grace period.
func killPod(ctx context.Context, p *corev1.Pod) {
	if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
		finishPod(ctx, p, 137)
	}
	if err := k8sClient.Delete(ctx, p, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		return // a conflict or a transient error: the next step retries
	}
}
