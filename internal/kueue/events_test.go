package kueue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func TestEventsAreAboutTheOperatorsPodElseTheCRD(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "manager-0", Namespace: "ibj-system", UID: "pod-uid"}}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crdName, UID: "crd-uid"}}
	podRef := &corev1.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: "ibj-system", Name: "manager-0", UID: "pod-uid"}
	crdRef := &corev1.ObjectReference{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: crdName, UID: "crd-uid"}
	cases := []struct {
		name                  string
		objects               []client.Object
		podName, podNamespace string
		want                  *corev1.ObjectReference
	}{
		{"the operator's Pod", []client.Object{pod, crd}, "manager-0", "ibj-system", podRef},
		{"no Pod named: the CRD", []client.Object{pod, crd}, "", "", crdRef},
		{"a Pod name without its namespace: the CRD", []client.Object{pod, crd}, "manager-0", "", crdRef},
		{"the Pod not found: the CRD", []client.Object{crd}, "manager-0", "ibj-system", crdRef},
		{"neither: no event", nil, "manager-0", "ibj-system", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(1)
			e := &eventReporter{
				recorder: recorder, reader: fakeReader(t, tc.objects...),
				podName: tc.podName, podNamespace: tc.podNamespace,
			}
			if diff := cmp.Diff(tc.want, e.target(context.Background())); diff != "" {
				t.Errorf("target (-want +got):\n%s", diff)
			}
			e.started(context.Background())
			if got := len(recorder.Events); (got == 1) != (tc.want != nil) {
				t.Errorf("%d events recorded, want one if and only if there is a target", got)
			}
		})
	}
}

func TestFailedEventSaysWhyAndWhenItIsTriedAgain(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: crdName, UID: "crd-uid"}}
	cases := []struct {
		name string
		err  error
		want string
	}{
		{
			name: "a short error, whole",
			err:  errors.New(`listing Workloads: workloads.kueue.x-k8s.io is forbidden`),
			want: "Warning KueueIntegrationFailed The Kueue integration failed in this replica, retrying in 4s: " +
				"listing Workloads: workloads.kueue.x-k8s.io is forbidden. IndexedBatchJobs without " +
				"kueue.x-k8s.io/queue-name run as usual; those with one wait suspended until it runs",
		},
		{
			name: "a long error, cut",
			err:  errors.New(strings.Repeat("x", 2000)),
			want: "Warning KueueIntegrationFailed The Kueue integration failed in this replica, retrying in 4s: " +
				strings.Repeat("x", maxErrorInNote) + " [...]. IndexedBatchJobs without " +
				"kueue.x-k8s.io/queue-name run as usual; those with one wait suspended until it runs",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			recorder := events.NewFakeRecorder(1)
			e := &eventReporter{recorder: recorder, reader: fakeReader(t, crd)}
			e.failed(context.Background(), tc.err, 4*time.Second)
			got := <-recorder.Events
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("event (-want +got):\n%s", diff)
			}
			// The note, without the fake recorder's type and reason.
			if note := strings.TrimPrefix(got, "Warning KueueIntegrationFailed "); len(note) > 1024 {
				t.Errorf("the note is %d bytes; events.k8s.io refuses one over 1024", len(note))
			}
		})
	}
}

func TestReportStateSetsOneStateOfTheGauge(t *testing.T) {
	for _, s := range states {
		reportState(s)
		for _, other := range states {
			want := 0.0
			if other == s {
				want = 1
			}
			if got := testutil.ToFloat64(integrationState.WithLabelValues(string(other))); got != want {
				t.Errorf("after reportState(%s): %s is %v, want %v", s, other, got, want)
			}
		}
	}
}

func fakeReader(t *testing.T, objects ...client.Object) client.Reader {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := apiextensionsv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithObjects(objects...).Build()
}
