package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestManagerCacheHoldsOnlyOperatorPodsWithoutManagedFields(t *testing.T) {
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
	if all := CacheOptions(nil); all.DefaultNamespaces != nil {
		t.Errorf("no namespaces should watch all, got %v", all.DefaultNamespaces)
	}
}

// TestManagerCacheHoldsOnlyOperatorServices: the headless Services are
// watched (Owns) through the manager's cache, which must not hold every
// Service of the cluster.
func TestManagerCacheHoldsOnlyOperatorServices(t *testing.T) {
	var sel labels.Selector
	for obj, by := range CacheOptions(nil).ByObject {
		if _, ok := obj.(*corev1.Service); ok {
			sel = by.Label
		}
	}
	if sel == nil {
		t.Fatal("no label selector for services: the cache would hold every Service in the cluster")
	}
	svc := newService(harness.MakeIndexedBatchJob("a", "ns").UID("123").PeerDNS("").Obj())
	if !sel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("selector does not match the operator's Service, labelled %v", svc.Labels)
	}
	if sel.Matches(labels.Set{"app": "web"}) || sel.Matches(labels.Set{ibjv1.JobNameLabel: "a"}) {
		t.Error("selector matches Services the operator did not create")
	}
}

// fixedPods is a pod cache that shows what a test puts in it, and nothing
// else: the reconciler's podLister in tests that play the watch by hand.
type fixedPods struct {
	pods map[types.UID]*jobpod.Pod
}

func newFixedPods() *fixedPods { return &fixedPods{pods: map[types.UID]*jobpod.Pod{}} }

func (f *fixedPods) List(namespace, job string) ([]*jobpod.Pod, error) {
	var out []*jobpod.Pod
	for _, p := range f.pods {
		if p.Namespace == namespace && p.JobName == job {
			out = append(out, p)
		}
	}
	return out, nil
}

func (f *fixedPods) Len() int { return len(f.pods) }

func (f *fixedPods) Get(namespace, job, name string) *jobpod.Pod {
	for _, p := range f.pods {
		if p.Namespace == namespace && p.JobName == job && p.Name == name {
			return p
		}
	}
	return nil
}

// set shows the pods as given, in place of what it showed of them.
func (f *fixedPods) set(pods ...*corev1.Pod) {
	for _, p := range pods {
		f.pods[p.UID] = jobpod.Read(p)
	}
}

// replace shows exactly the given pods.
func (f *fixedPods) replace(pods []*corev1.Pod) {
	clear(f.pods)
	f.set(pods...)
}
