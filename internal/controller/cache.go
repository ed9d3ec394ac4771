package controller

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// CacheOptions makes the manager cache only this operator's pods (those
// with the controller-uid label), and no object's managedFields, so that
// memory follows the operator's pods rather than the cluster's. An empty
// namespaces list watches every namespace.
func CacheOptions(namespaces []string) cache.Options {
	ours, err := labels.NewRequirement(ibjv1.ControllerUIDLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant, valid label key
	}
	opts := cache.Options{
		DefaultTransform: cache.TransformStripManagedFields(),
		ByObject: map[client.Object]cache.ByObject{
			&corev1.Pod{}: {Label: labels.NewSelector().Add(*ours)},
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
