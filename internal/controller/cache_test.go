package controller

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/indexset"
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
// It keeps settled pods out of ListUnsettled as podcache.Source does,
// until a test sets them again or replaces them with another version.
type fixedPods struct {
	pods map[types.UID]*jobpod.Pod
	// settled are the settled pods' UIDs, for the job of UID settledFor,
	// with the indexes settled and the latest end among them.
	settled        map[types.UID]bool
	settledFor     types.UID
	settledIndexes indexset.Set
	lastSuccess    time.Time
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

func (f *fixedPods) ListUnsettled(namespace, job string, owner types.UID) ([]*jobpod.Pod, indexset.Set, time.Time) {
	if f.settledFor != owner {
		f.Unsettle(namespace, job)
	}
	listed, _ := f.List(namespace, job)
	return slices.DeleteFunc(listed, func(p *jobpod.Pod) bool { return f.settled[p.UID] }), f.settledIndexes, f.lastSuccess
}

func (f *fixedPods) Settle(namespace, job string, owner types.UID, pods []*jobpod.Pod) {
	if len(pods) == 0 {
		return
	}
	if f.settledFor != owner {
		f.Unsettle(namespace, job)
	}
	if f.settled == nil {
		f.settled = map[types.UID]bool{}
	}
	for _, p := range pods {
		if f.pods[p.UID] != p {
			continue // changed since it was listed
		}
		f.settled[p.UID], f.settledFor = true, owner
		f.settledIndexes = f.settledIndexes.Add(p.Index)
		if p.FinishedAt.After(f.lastSuccess) {
			f.lastSuccess = p.FinishedAt
		}
	}
}

func (f *fixedPods) Unsettle(string, string) {
	f.settled, f.settledFor, f.settledIndexes, f.lastSuccess = nil, "", indexset.Set{}, time.Time{}
}

// FailureSeen is zero: the tests that play the watch by hand hold no
// failure's batch.
func (f *fixedPods) FailureSeen(string, string) time.Time { return time.Time{} }

// settledCount is how many pods the cache keeps out of ListUnsettled.
func (f *fixedPods) settledCount() int { return len(f.settled) }

func (f *fixedPods) Len() int { return len(f.pods) }

// FailingJobs is none, as FailureSeen.
func (f *fixedPods) FailingJobs() int { return 0 }

func (f *fixedPods) Get(namespace, job, name string) *jobpod.Pod {
	for _, p := range f.pods {
		if p.Namespace == namespace && p.JobName == job && p.Name == name {
			return p
		}
	}
	return nil
}

// set shows the pods as given, in place of what it showed of them: none of
// them is settled any more.
func (f *fixedPods) set(pods ...*corev1.Pod) {
	for _, p := range pods {
		f.pods[p.UID] = jobpod.Read(p)
		delete(f.settled, p.UID)
	}
}

// replace shows exactly the given pods. A settled pod stays settled if its
// resourceVersion is what it was: the cache saw no change of it.
func (f *fixedPods) replace(pods []*corev1.Pod) {
	was := f.pods
	f.pods = make(map[types.UID]*jobpod.Pod, len(pods))
	for _, p := range pods {
		if old := was[p.UID]; old != nil && f.settled[p.UID] && p.ResourceVersion != "" && old.ResourceVersion == p.ResourceVersion {
			f.pods[p.UID] = old
			continue
		}
		f.pods[p.UID] = jobpod.Read(p)
		delete(f.settled, p.UID)
	}
	for uid := range f.settled {
		if f.pods[uid] == nil {
			delete(f.settled, uid)
		}
	}
}
