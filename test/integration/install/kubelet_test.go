package install_test

import (
	"context"
	"strconv"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
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

	mu sync.Mutex
	utils.PodLedger
	running  map[string]time.Time // pod -> when it was marked Running
	finished int                  // pods this kubelet ended
	stop     context.CancelFunc
	done     chan struct{}
}

func startKubelet(ns, job string, runFor time.Duration, exitCode func(index int) int32) *kubelet {
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubelet{ns: ns, job: job, exitCode: exitCode, runFor: runFor,
		running: map[string]time.Time{}, stop: cancel, done: make(chan struct{})}
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
	k.Observe(pods)

	for i := range pods {
		p := &pods[i]
		if ctx.Err() != nil {
			return
		}
		switch {
		case p.DeletionTimestamp != nil:
			_ = utils.KillPod(ctx, k8sClient, p)
		case p.Spec.NodeName == "":
			_ = utils.BindPod(ctx, k8sClient, p)
		case p.Status.Phase == corev1.PodPending || p.Status.Phase == "":
			if utils.RunPod(ctx, k8sClient, p) == nil {
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
			if utils.FinishPod(ctx, k8sClient, p, k.exitCode(ix)) == nil {
				k.mu.Lock()
				k.finished++
				k.mu.Unlock()
			}
		}
	}
}

// finishedPods is how many pods the kubelet has ended.
func (k *kubelet) finishedPods() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.finished
}
