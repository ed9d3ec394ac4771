package kwokcluster

import (
	"context"
	"log"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// runReaper makes the kubelet's last API call for the fake nodes: once a
// deleted pod has finished and has no finalizer left, it deletes the pod for
// good with grace period 0 and a UID precondition, as the kubelet does. kwok
// could do it with a Stage (next.delete), but it deletes by name only, and a
// controller that names pods deterministically (this operator does: a
// replacement may take the name of the pod it replaces) would see kwok's
// delete meant for the old pod hit the new one.
func runReaper(ctx context.Context, client kubernetes.Interface, logger *log.Logger) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "spec.nodeName!=" }))
	lister := factory.Core().V1().Pods().Lister()
	kick := make(chan struct{}, 1)
	if _, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { trigger(kick) },
		UpdateFunc: func(any, any) { trigger(kick) },
	}); err != nil {
		logger.Printf("reaper: %v", err)
		return
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	defer factory.Shutdown()

	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-tick.C:
		}
		pods, err := lister.List(labels.Everything())
		if err != nil {
			continue
		}
		for _, pod := range pods {
			if ctx.Err() != nil {
				return
			}
			if !reapable(pod) {
				continue
			}
			opts := metav1.NewPreconditionDeleteOptions(string(pod.UID))
			opts.GracePeriodSeconds = ptr.To[int64](0)
			err := client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, *opts)
			switch {
			case err == nil:
				logger.Printf("Removed finished pod %s/%s (uid %s)", pod.Namespace, pod.Name, pod.UID)
			case apierrors.IsNotFound(err), apierrors.IsConflict(err):
				// Gone already, or the name now belongs to another pod.
			default:
				logger.Printf("Removing finished pod %s/%s failed: %v", pod.Namespace, pod.Name, err)
			}
		}
	}
}

// reapable: deleted, finished, no finalizer holds it, and not deleted with
// grace period 0 already (the API server removes those itself).
func reapable(pod *corev1.Pod) bool {
	if pod.DeletionTimestamp == nil || len(pod.Finalizers) > 0 {
		return false
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return false
	}
	return pod.DeletionGracePeriodSeconds == nil || *pod.DeletionGracePeriodSeconds > 0
}
