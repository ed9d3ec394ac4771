package kwokcluster

import (
	"context"
	"log"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// binder is the cluster's scheduler, as small as will do: kwok runs the pods
// of its nodes but schedules nothing, and kube-scheduler runs only with
// Options.KubeScheduler (its binary is built for the gang specs). It binds each pending pod to a fake node that is
// Ready, not cordoned, carries the labels of the pod's nodeSelector and whose
// NoSchedule/NoExecute taints the pod tolerates; pods with scheduling gates
// wait. Among fitting nodes it takes the one with the fewest pods it bound,
// so the pods of a job spread over the nodes. Node affinity, resources and
// topology spread are not modelled.
type binder struct {
	client kubernetes.Interface
	log    *log.Logger
	bound  map[string]int // node name -> pods bound so far
	stuck  map[string]bool
}

// runBinder binds pending pods until ctx ends.
func runBinder(ctx context.Context, client kubernetes.Interface, logger *log.Logger) {
	b := &binder{client: client, log: logger, bound: map[string]int{}, stuck: map[string]bool{}}
	pending := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName=" }))
	nodes := informers.NewSharedInformerFactory(client, 0)
	podLister := pending.Core().V1().Pods().Lister()
	nodeLister := nodes.Core().V1().Nodes().Lister()

	// Any change to a pending pod or a node is a reason to try again; a
	// ticker covers the rest (a bind that failed for a transient reason).
	kick := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger(kick) },
		UpdateFunc: func(any, any) { trigger(kick) },
	}
	if _, err := pending.Core().V1().Pods().Informer().AddEventHandler(notify); err != nil {
		b.log.Printf("binder: %v", err)
		return
	}
	if _, err := nodes.Core().V1().Nodes().Informer().AddEventHandler(notify); err != nil {
		b.log.Printf("binder: %v", err)
		return
	}
	pending.Start(ctx.Done())
	nodes.Start(ctx.Done())
	pending.WaitForCacheSync(ctx.Done())
	nodes.WaitForCacheSync(ctx.Done())

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			pending.Shutdown()
			nodes.Shutdown()
			return
		case <-kick:
		case <-tick.C:
		}
		pods, err := podLister.List(labels.Everything())
		if err != nil {
			continue
		}
		all, err := nodeLister.List(labels.Everything())
		if err != nil {
			continue
		}
		sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
		for _, pod := range pods {
			if ctx.Err() != nil {
				return
			}
			b.schedule(ctx, pod, all)
		}
	}
}

func trigger(kick chan struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

func (b *binder) schedule(ctx context.Context, pod *corev1.Pod, nodes []*corev1.Node) {
	if pod.Spec.NodeName != "" || pod.DeletionTimestamp != nil || len(pod.Spec.SchedulingGates) > 0 {
		return
	}
	if name := pod.Spec.SchedulerName; name != "" && name != corev1.DefaultSchedulerName {
		return
	}
	var best *corev1.Node
	for _, node := range nodes {
		if fits(pod, node) && (best == nil || b.bound[node.Name] < b.bound[best.Name]) {
			best = node
		}
	}
	key := pod.Namespace + "/" + pod.Name
	if best == nil {
		if !b.stuck[key] {
			b.stuck[key] = true
			b.log.Printf("No node fits pod %s (nodeSelector %v)", key, pod.Spec.NodeSelector)
		}
		return
	}
	err := b.client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
		Target:     corev1.ObjectReference{Kind: "Node", Name: best.Name},
	}, metav1.CreateOptions{})
	switch {
	case err == nil:
		b.bound[best.Name]++
		delete(b.stuck, key)
		b.log.Printf("Bound pod %s to node %s", key, best.Name)
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		// Deleted, or bound meanwhile: nothing to do.
	default:
		b.log.Printf("Binding pod %s to node %s failed: %v", key, best.Name, err)
	}
}

// fits reports whether the pod may run on the node.
func fits(pod *corev1.Pod, node *corev1.Node) bool {
	if node.Spec.Unschedulable || node.DeletionTimestamp != nil || !NodeReady(node) {
		return false
	}
	if !labels.SelectorFromSet(pod.Spec.NodeSelector).Matches(labels.Set(node.Labels)) {
		return false
	}
	for _, taint := range node.Spec.Taints {
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool { return t.ToleratesTaint(klog.Background(), &taint, false) }) {
			return false
		}
	}
	return true
}

// NodeReady reports whether the node's Ready condition is True.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
