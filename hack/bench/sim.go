package main

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Labels the benchmark puts on the pod template: the simulator only plays
// the kubelet for pods carrying benchLabel, and fails every index i with
// i % failMod == 0 when failModLabel is set.
const (
	benchLabel      = "bench.indexedjob.dev/workload"
	failModLabel    = "bench.indexedjob.dev/fail-mod"
	upstreamIndex   = "batch.kubernetes.io/job-completion-index"
	ourIndex        = "batch.indexedjob.dev/completion-index"
	simulatorAgent  = "bench-pod-simulator"
	simulatorWorker = 48
)

// simulator plays every kubelet at once: a new pod finishes at once (one
// status write), a pod being deleted is failed (as a kubelet would on
// shutdown) so that the controllers see a terminal phase.
type simulator struct {
	cs       kubernetes.Interface
	queue    workqueue.TypedRateLimitingInterface[string]
	indexer  cache.Indexer
	finished atomic.Int64
	done     sync.Map // pod UID -> struct{}: status already written
}

func newSimulator(cs kubernetes.Interface) *simulator {
	return &simulator{
		cs: cs,
		queue: workqueue.NewTypedRateLimitingQueue(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second)),
	}
}

func (s *simulator) run(ctx context.Context) {
	f := informers.NewSharedInformerFactoryWithOptions(s.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = benchLabel }))
	inf := f.Core().V1().Pods().Informer()
	s.indexer = inf.GetIndexer()
	enqueue := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			s.queue.Add(key)
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
	})
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	for range simulatorWorker {
		go func() {
			for s.next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	s.queue.ShutDown()
}

func (s *simulator) next(ctx context.Context) bool {
	key, quit := s.queue.Get()
	if quit {
		return false
	}
	defer s.queue.Done(key)
	if err := s.sync(ctx, key); err != nil {
		if ctx.Err() == nil {
			s.queue.AddRateLimited(key)
		}
		return true
	}
	s.queue.Forget(key)
	return true
}

func (s *simulator) sync(ctx context.Context, key string) error {
	obj, ok, err := s.indexer.GetByKey(key)
	if err != nil || !ok {
		return err
	}
	pod := obj.(*corev1.Pod)
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if terminal {
		return nil
	}
	if _, seen := s.done.Load(pod.UID); seen {
		return nil // our write is not in the cache yet
	}
	fail := pod.DeletionTimestamp != nil
	if !fail {
		if mod, err := strconv.Atoi(pod.Labels[failModLabel]); err == nil && mod > 0 {
			idx := pod.Labels[ourIndex]
			if idx == "" {
				idx = pod.Labels[upstreamIndex]
			}
			if i, err := strconv.Atoi(idx); err == nil && i%mod == 0 {
				fail = true
			}
		}
	}
	now := metav1.Now()
	p := pod.DeepCopy()
	exit, reason := int32(0), "Completed"
	p.Status.Phase = corev1.PodSucceeded
	if fail {
		exit, reason = 1, "Error"
		p.Status.Phase = corev1.PodFailed
	}
	p.Status.StartTime = &now
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, Reason: "PodCompleted", LastTransitionTime: now}}
	p.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{
			Name:  c.Name,
			Image: c.Image,
			Ready: false, Started: ptr.To(false),
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
				ExitCode: exit, Reason: reason, StartedAt: now, FinishedAt: now,
			}},
		})
	}
	_, err = s.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if apierrors.IsConflict(err) {
		// The informer will bring the newer version; retry from it.
		return err
	}
	if err != nil {
		return err
	}
	s.done.Store(pod.UID, struct{}{})
	s.finished.Add(1)
	return nil
}
