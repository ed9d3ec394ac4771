package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// CacheOptions configures the manager's cache over the given namespaces
// (all when empty), which holds the jobs and their headless Services without
// their managedFields. Services are limited to the operator's own (those
// with the controller-uid label) rather than every Service of the cluster.
// The controller keeps its pods in a cache of its own (podSource) and never
// reads pods through the manager's; should anything ever do so, that cache
// is limited to this operator's pods in the same way.
func CacheOptions(namespaces []string) cache.Options {
	ours, err := labels.NewRequirement(ibjv1.ControllerUIDLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}:     {Label: labels.NewSelector().Add(*ours)},
			&corev1.Service{}: {Label: labels.NewSelector().Add(*ours)},
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
