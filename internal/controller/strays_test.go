package controller

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
)

// A stray pod is let go in one patch: the operator's finalizers and the
// job's controller reference go, another controller's finalizer and other
// owners stay, and the job it left is queued for a sync.
func TestStrayPodIsReleased(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "a-0-0", Namespace: "ns", UID: "pod-uid",
		Labels:     map[string]string{ibjv1.ControllerUIDLabel: "job-uid"},
		Finalizers: []string{ibjv1.TrackingFinalizer, "example.com/keep", ibjv1.IndexRetryFinalizer},
		OwnerReferences: []metav1.OwnerReference{
			{APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob", Name: "a", UID: "job-uid", Controller: ptr.To(true)},
			{APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm-uid"},
		},
	}}
	job := &ibjv1.IndexedBatchJob{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", UID: "job-uid"}}
	c := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(pod, job).Build()
	r := NewReconciler(c, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	r.jobs.seen(types.NamespacedName{Namespace: "ns", Name: "a"}, "job-uid")
	var woken []string
	r.wake = func(req reconcile.Request) { woken = append(woken, req.Name) }

	// The job-name label is gone: the cache's record is stray.
	r.strays.add(jobpod.Read(pod))
	if !r.strays.next(context.Background()) {
		t.Fatal("the queue shut down")
	}
	got := &corev1.Pod{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(pod), got); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Finalizers, []string{"example.com/keep"}) {
		t.Errorf("finalizers %v, want only the other controller's", got.Finalizers)
	}
	if len(got.OwnerReferences) != 1 || got.OwnerReferences[0].UID != "cm-uid" {
		t.Errorf("owner references %v, want only the ConfigMap", got.OwnerReferences)
	}
	if !slices.Equal(woken, []string{"a"}) {
		t.Errorf("jobs woken %v, want a", woken)
	}
	if r.strays.size() != 0 {
		t.Errorf("%d strays left in the queue, want 0", r.strays.size())
	}
	// A pod already gone is no error.
	r.strays.add(&jobpod.Pod{Meta: jobpod.Meta{Name: "gone", Namespace: "ns", UID: "x"}, Tracked: true})
	r.strays.next(context.Background())
	if r.strays.size() != 0 {
		t.Errorf("a stray already gone was queued again")
	}
}

// A pod edited out of its job before a sync saw it as the job's would hold
// the job's creates until the expectation timed out: its create is
// forgotten when the cache reports it stray.
func TestStrayPodIsNoLongerAnExpectedCreate(t *testing.T) {
	r := NewReconciler(nil, nil, clock.RealClock{}, jobpod.DefaultBackoff)
	now := time.Now()
	r.jobs.expectCreate("job-uid", "a-0-0", now)
	stray := &jobpod.Pod{Meta: jobpod.Meta{Name: "a-0-0", Namespace: "ns", UID: "pod-uid"}, OwnerUID: "job-uid", UIDLabel: "job-uid", Tracked: true}
	if r.jobs.podsSeen("job-uid", among(), now) {
		t.Fatal("the create is not expected before the stray is reported")
	}
	r.strays.add(stray)
	if !r.jobs.podsSeen("job-uid", among(), now) {
		t.Error("the job still waits for the create of a pod edited out of it")
	}
	r.strays.add(&jobpod.Pod{Meta: jobpod.Meta{Name: "b-0-0", Namespace: "ns"}, OwnerUID: "other-job", Tracked: true})
	if got := r.jobs.sizes()["job_states"]; got != 1 {
		t.Errorf("%d jobs with expectations, want 1: a stray of a job without any makes no entry", got)
	}
}
