package controller_test

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
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

	mu sync.Mutex
	utils.PodLedger
	stop context.CancelFunc
	done chan struct{}
}

func startKubelet(ns, job string, decide func(index, attempt int) outcome) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{ns: ns, job: job, decide: decide, stop: cancel, done: make(chan struct{})}
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
	k.Observe(pods)
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
				_ = utils.KillPod(ctx, k8sClient, p)
			}
		case p.Spec.NodeName == "":
			_ = utils.BindPod(ctx, k8sClient, p)
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			_ = utils.RunPod(ctx, k8sClient, p)
		case p.Status.Phase == corev1.PodRunning:
			ix, _ := strconv.Atoi(p.Labels[ibjv1.CompletionIndexLabel])
			attempt, _ := strconv.Atoi(p.Annotations["batch.indexedjob.dev/attempt"])
			switch o := k.decide(ix, attempt); {
			case o.disrupted:
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
					Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", LastTransitionTime: metav1.Now()})
				_ = utils.FinishPod(ctx, k8sClient, p, 137)
			case !o.stay:
				_ = utils.FinishPod(ctx, k8sClient, p, o.exitCode)
			}
		}
	}
}

func jobPods(ctx context.Context, ns, job string) []corev1.Pod {
	var list corev1.PodList
	Expect(k8sClient.List(ctx, &list, client.InNamespace(ns), client.MatchingLabels{ibjv1.JobNameLabel: job})).To(Succeed())
	sort.Slice(list.Items, func(a, b int) bool { return list.Items[a].Name < list.Items[b].Name })
	return list.Items
}

// getJob reads the job fresh from the API server.
func getJob(ctx context.Context, ns, name string) *ibjv1.IndexedBatchJob {
	job := &ibjv1.IndexedBatchJob{}
	Expect(k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, job)).To(Succeed())
	return job
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
