package controller

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// CacheOptions makes the manager cache only this operator's pods (those
// with the controller-uid label), only the parts of them a sync reads, and
// no object's managedFields, so that memory follows the operator's pods
// rather than the cluster's. An empty
// namespaces list watches every namespace.
func CacheOptions(namespaces []string) cache.Options {
	ours, err := labels.NewRequirement(ibjv1.ControllerUIDLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*ours), Transform: trimPod},
		},
	}
	if len(namespaces) > 0 {
		opts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range namespaces {
			opts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	return opts
}

// trimPod keeps of a pod what the decision core reads: its metadata (without
// managedFields, and only this operator's labels and annotations), phase, conditions and the containers' names, states and
// restart counts. The spec and the rest of the status, most of a pod's size,
// are dropped: the controller builds new pods from the job's template and
// never writes back a cached pod.
func trimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	pod.ManagedFields = nil
	pod.Labels = ownKeys(pod.Labels)
	pod.Annotations = ownKeys(pod.Annotations)
	pod.Spec = corev1.PodSpec{}
	pod.Status = corev1.PodStatus{
		Phase:                 pod.Status.Phase,
		Conditions:            pod.Status.Conditions,
		InitContainerStatuses: trimContainerStatuses(pod.Status.InitContainerStatuses),
		ContainerStatuses:     trimContainerStatuses(pod.Status.ContainerStatuses),
	}
	return pod, nil
}

// ownPrefix starts every label and annotation key the controller reads.
const ownPrefix = "batch.indexedjob.dev/"

// ownKeys keeps the entries of m whose keys are this operator's: the
// labels and annotations a user's template puts on every pod are copied
// into each one, and no sync reads them.
func ownKeys(m map[string]string) map[string]string {
	n := 0
	for k := range m {
		if strings.HasPrefix(k, ownPrefix) {
			n++
		}
	}
	if n == len(m) {
		return m
	}
	out := make(map[string]string, n)
	for k, v := range m {
		if strings.HasPrefix(k, ownPrefix) {
			out[k] = v
		}
	}
	return out
}

func trimContainerStatuses(in []corev1.ContainerStatus) []corev1.ContainerStatus {
	if len(in) == 0 {
		return nil
	}
	out := make([]corev1.ContainerStatus, len(in))
	for i, cs := range in {
		out[i] = corev1.ContainerStatus{Name: cs.Name, State: cs.State, RestartCount: cs.RestartCount}
	}
	return out
}
