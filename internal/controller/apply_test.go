package controller

import (
	"context"
	"strings"
	"testing"

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
	"github.com/indexed-batch-job/indexed-batch-job/test/utils"
)

// A pod deleted uncounted is reported as soon as it is gone, even when the
// status write of the same sync fails: the next sync no longer sees it.
func TestApplyReportsADeletedPodWhenTheStatusWriteFails(t *testing.T) {
	job := utils.MakeIndexedBatchJob("a", "ns").UID("job-uid").Completions(2).Obj()
	stray := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a-abc", Namespace: "ns"}}
	api := fake.NewClientBuilder().WithScheme(simScheme()).WithObjects(job, stray).WithStatusSubresource(job).Build()
	c := interceptor.NewClient(api, interceptor.Funcs{
		SubResourceUpdate: func(context.Context, client.Client, string, client.Object, ...client.SubResourceUpdateOption) error {
			return apierrors.NewConflict(schema.GroupResource{Group: ibjv1.GroupVersion.Group, Resource: "indexedbatchjobs"}, "a", nil)
		},
	})
	recorder := events.NewFakeRecorder(10)
	r := NewReconciler(c, recorder, clock.RealClock{}, DefaultBackoff)

	pod := &cachedPod{}
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
