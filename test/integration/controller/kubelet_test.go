package controller_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// outcome is what the fake kubelet does with a pod once it runs it.
type outcome struct {
	exitCode  int32 // 0 succeeds, anything else fails
	stay      bool  // keep it running
	disrupted bool  // fail it with condition DisruptionTarget, as an eviction does
}

// kubelet plays the node agent for the pods of one job: it binds new pods
// and marks them Running and Ready, then finishes them as decide says; a
// terminating pod is marked Failed and removed, as a kubelet would after
// killing it. It also watches that no index ever has two pods that have not
// finished, and records every pod it saw per index.
type kubelet struct {
	ns, job string
	decide  func(index, attempt int) outcome
	// holdTerminating keeps terminating pods terminating until released.
	holdTerminating bool

	mu          sync.Mutex
	attempts    map[int]map[string]bool // index -> pod names seen
	maxActive   int                     // most unfinished pods seen at once
	doubleIndex string                  // first index seen with two unfinished pods
	stop        context.CancelFunc
	done        chan struct{}
}

func startKubelet(ns, job string, decide func(index, attempt int) outcome) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{ns: ns, job: job, decide: decide, attempts: map[int]map[string]bool{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer GinkgoRecover()
		defer close(k.done)
		for ctx.Err() == nil {
			k.step(ctx)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return k
}

func (k *kubelet) Stop() {
	k.stop()
	<-k.done
}

func (k *kubelet) setHold(hold bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.holdTerminating = hold
}

func (k *kubelet) step(ctx context.Context) {
	var list corev1.PodList
	if err := k8sClient.List(ctx, &list, client.InNamespace(k.ns), client.MatchingLabels{ibjv1.JobNameLabel: k.job}); err != nil {
		return // stopping, or a transient error: the next step retries
	}
	pods := list.Items
	unfinished := map[int]int{}
	total := 0
	k.mu.Lock()
	hold := k.holdTerminating
	for _, p := range pods {
		ix, _ := strconv.Atoi(p.Labels[ibjv1.CompletionIndexLabel])
		if k.attempts[ix] == nil {
			k.attempts[ix] = map[string]bool{}
		}
		k.attempts[ix][p.Name] = true
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			unfinished[ix]++
			total++
			if unfinished[ix] > 1 && k.doubleIndex == "" {
				k.doubleIndex = fmt.Sprintf("index %d at %s", ix, time.Now().Format(time.RFC3339Nano))
			}
		}
	}
	k.maxActive = max(k.maxActive, total)
	k.mu.Unlock()

	for i := range pods {
		p := &pods[i]
		if ctx.Err() != nil {
			return
		}
		switch {
		case p.DeletionTimestamp != nil:
			if !hold {
				killPod(ctx, p)
			}
		case p.Spec.NodeName == "":
			bind(ctx, p)
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			run(ctx, p)
		case p.Status.Phase == corev1.PodRunning:
			ix, _ := strconv.Atoi(p.Labels[ibjv1.CompletionIndexLabel])
			attempt, _ := strconv.Atoi(p.Annotations["batch.indexedjob.dev/attempt"])
			switch o := k.decide(ix, attempt); {
			case o.disrupted:
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
					Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.Now()})
				finishPod(ctx, p, 137)
			case !o.stay:
				finishPod(ctx, p, o.exitCode)
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

func (k *kubelet) doubles() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.doubleIndex
}

func (k *kubelet) peakActive() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.maxActive
}

func jobPods(ctx context.Context, ns, job string) []corev1.Pod {
	var list corev1.PodList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job})).To(Succeed())
	sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].Name < list.Items[b].Name })
	return list.Items
}

// bind binds the pod to a node, so that deleting it is graceful as on a
// real node.
func bind(ctx context.Context, p *corev1.Pod) {
	_ = k8sClient.SubResource("binding").Create(ctx, p, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		Target:     corev1.ObjectReference{Kind: "Node", Name: "node-1"},
	})
}

// run marks a bound pod Running and Ready.
func run(ctx context.Context, p *corev1.Pod) {
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
	_ = ignoreGone(k8sClient.Status().Update(ctx, p))
}

// finishPod terminates every container with the exit code.
func finishPod(ctx context.Context, p *corev1.Pod, exitCode int32) {
	now := metav1.Now()
	p.Status.Phase = corev1.PodSucceeded
	if exitCode != 0 {
		p.Status.Phase = corev1.PodFailed
	}
	var conditions []corev1.PodCondition
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady {
			conditions = append(conditions, c)
		}
	}
	p.Status.Conditions = append(conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: now})
	for i := range p.Status.ContainerStatuses {
		p.Status.ContainerStatuses[i].Ready = false
		p.Status.ContainerStatuses[i].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: exitCode, FinishedAt: now}}
	}
	_ = ignoreGone(k8sClient.Status().Update(ctx, p))
}

// killPod ends a terminating pod the way a kubelet does: phase Failed
// (exit code 137), then the final delete with no grace period.
func killPod(ctx context.Context, p *corev1.Pod) {
	if p.Status.Phase != corev1.PodFailed && p.Status.Phase != corev1.PodSucceeded {
		finishPod(ctx, p, 137)
	}
	_ = ignoreGone(k8sClient.Delete(ctx, p, client.GracePeriodSeconds(0)))
}

func ignoreGone(err error) error {
	if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// getJob reads the job fresh from the API server.
func getJob(ctx context.Context, ns, name string) *ibjv1.IndexedBatchJob {
	job := &ibjv1.IndexedBatchJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)).To(Succeed())
	return job
}

// conditionReason is the reason of a True condition, or "" if not True.
func conditionReason(job *ibjv1.IndexedBatchJob, typ string) string {
	for _, c := range job.Status.Conditions {
		if c.Type == typ && c.Status == metav1.ConditionTrue {
			return c.Reason
		}
	}
	return ""
}

// expectNoFinalizers checks that no pod of the job keeps the tracking finalizer.
func expectNoFinalizers(ctx context.Context, ns, job string) {
	Eventually(func() []string {
		var held []string
		for _, p := range jobPods(ctx, ns, job) {
			for _, f := range p.Finalizers {
				if f == ibjv1.TrackingFinalizer {
					held = append(held, p.Name)
				}
			}
		}
		return held
	}, 20*time.Second, 100*time.Millisecond).Should(BeEmpty())
}
