package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

// A pod deleted uncounted is reported as soon as it is gone, even when the
// status write of the same sync fails: the next sync no longer sees it.
func TestApplyReportsADeletedPodWhenTheStatusWriteFails(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-abc", Namespace: "ns"}}
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job, stray).WithStatusSubresource(job).Build()
	c := interceptor.NewClient(api, interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return apierrors.NewConflict(schema.GroupResource{Group: ibjv1.GroupVersion.Group, Resource: "indexedbatchjobs"}, "a", nil)
		},
	})
	recorder := events.NewFakeRecorder(10)
	r := NewReconciler(c, recorder, clock.RealClock{}, DefaultBackoff)

	pod := &jobpod.Pod{}
	pod.Name, pod.Namespace = stray.Name, stray.Namespace
	status := *job.Status.DeepCopy()
	status.Terminating = ptr.To[int32](1) // a change, so that the status is written
	p := plan{status: status, delete: []podDeletion{{pod: pod, stripFinalizer: true, reason: "invalid completion index",
		event: ptr.To(warningEvent("InvalidPodIndex", "Deleted pod a-abc without counting it"))}}}
	if _, err := r.apply(context.Background(), job, p); err == nil {
		t.Fatal("apply succeeded although the status write failed")
	}
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(stray), &corev1.Pod{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the stray pod is still there: %v", err)
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.Contains(got[0], "InvalidPodIndex") {
		t.Errorf("events %q, want the InvalidPodIndex warning", got)
	}
}

// A held status (plan.holdStatus) is not written, its pods are not queued
// for release, and the sync comes back when the hold ends; once something
// besides the counters changed, the status is written all the same.
func TestApplyHoldsAStatusThatOnlyMovesCounters(t *testing.T) {
	job := harness.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	job.Status.StartTime, job.Status.Phase, job.Status.Active = &metav1.Time{Time: time.Now()}, ibjv1.PhaseRunning, 2
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job).WithStatusSubresource(job).Build()
	if err := api.Get(context.Background(), client.ObjectKeyFromObject(job), job); err != nil {
		t.Fatal(err)
	}
	writes := 0
	c := interceptor.NewClient(api, interceptor.Funcs{
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			writes++
			return cl.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	r := NewReconciler(c, nil, clock.RealClock{}, DefaultBackoff)
	succeeded := &jobpod.Pod{}
	succeeded.Name, succeeded.Namespace, succeeded.UID = "a-0-0", "ns", "pod-uid"

	status := *job.Status.DeepCopy()
	status.Succeeded, status.CompletedIndexes = 1, "0"
	held := plan{status: status, releaseLater: []*jobpod.Pod{succeeded}, holdStatus: 300 * time.Millisecond}
	res, err := r.apply(context.Background(), job, held)
	if err != nil {
		t.Fatal(err)
	}
	if writes != 0 || r.later.size() != 0 || res.RequeueAfter != 300*time.Millisecond {
		t.Errorf("held: %d status writes, %d pods queued for release, requeue after %v; want 0, 0, 300ms", writes, r.later.size(), res.RequeueAfter)
	}

	moved := held
	moved.status = *status.DeepCopy()
	moved.status.Failed = 1 // not a counter that may wait
	if _, err := r.apply(context.Background(), job, moved); err != nil {
		t.Fatal(err)
	}
	if writes != 1 || r.later.size() != 1 {
		t.Errorf("not only counters: %d status writes, %d pods queued for release; want 1 and 1", writes, r.later.size())
	}
}
