package controller

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
)

func TestCacheHoldsOnlyOperatorPodsWithoutManagedFields(t *testing.T) {
	opts := CacheOptions([]string{"team-a", "team-b"})
	var sel labels.Selector
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Pod); ok {
			sel = by.Label
		}
	}
	if sel == nil {
		t.Fatal("no label selector for pods: the cache would hold every pod in the cluster")
	}
	if !sel.Matches(labels.Set{ibjv1.ControllerUIDLabel: "123"}) {
		t.Error("selector does not match the operator's pods")
	}
	if sel.Matches(labels.Set{"app": "web"}) || sel.Matches(labels.Set{ibjv1.JobNameLabel: "x"}) {
		t.Error("selector matches pods the operator does not own")
	}
	if len(opts.DefaultNamespaces) != 2 {
		t.Errorf("watched namespaces = %v, want team-a and team-b", opts.DefaultNamespaces)
	}
	if _, err := opts.DefaultTransform(&corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	var trim func(any) (any, error)
	for obj, by := range opts.ByObject {
		if _, ok := obj.(*corev1.Pod); ok {
			trim = by.Transform
		}
	}
	if trim == nil {
		t.Fatal("cached pods are not trimmed")
	}
	pod := makePod(utils.MakeIndexedBatchJob("a", "ns").Obj(), 0).failedAt(time.Unix(0, 0), 3).obj()
	pod.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}
	pod.Status.ContainerStatuses[0].Image = "busybox"
	pod.Status.PodIP = "10.0.0.1"
	labelsBefore, annotationsBefore, finalizers := len(pod.Labels), len(pod.Annotations), pod.Finalizers
	pod.Labels["app.kubernetes.io/name"] = "trainer"
	pod.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
	out, err := trim(pod)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Pod)
	if len(got.ManagedFields) != 0 || len(got.Spec.Containers) != 0 || got.Status.PodIP != "" || got.Status.ContainerStatuses[0].Image != "" ||
		got.Labels["app.kubernetes.io/name"] != "" || got.Annotations["kubectl.kubernetes.io/last-applied-configuration"] != "" {
		t.Errorf("trimmed pod keeps what a sync never reads: %+v", got)
	}
	if got.Status.Phase != corev1.PodFailed || got.Status.ContainerStatuses[0].State.Terminated.ExitCode != 3 ||
		len(got.Labels) != labelsBefore || len(got.Annotations) != annotationsBefore || len(got.Finalizers) != len(finalizers) {
		t.Errorf("trimmed pod lost what a sync reads: %+v", got)
	}
	if all := CacheOptions(nil); all.DefaultNamespaces != nil {
		t.Errorf("no namespaces should watch all, got %v", all.DefaultNamespaces)
	}
}
