package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/jobpod"
	"github.com/indexed-batch-job/indexed-batch-job/internal/podbuild"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

func TestNewService(t *testing.T) {
	owner := metav1.OwnerReference{
		APIVersion: ibjv1.GroupVersion.String(), Kind: "IndexedBatchJob", Name: "tf", UID: "job-uid",
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
	headless := func(name string) *corev1.Service {
		return &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{
				Name:            name,
				Namespace:       "ns",
				Labels:          map[string]string{ibjv1.JobNameLabel: "tf", ibjv1.ControllerUIDLabel: "job-uid"},
				OwnerReferences: []metav1.OwnerReference{owner},
			},
			Spec: corev1.ServiceSpec{
				ClusterIP:                corev1.ClusterIPNone,
				Selector:                 map[string]string{ibjv1.ControllerUIDLabel: "job-uid"},
				PublishNotReadyAddresses: true,
			},
		}
	}
	base := harness.MakeIndexedBatchJob("tf", "ns").UID("job-uid").Completions(2).Parallelism(2)
	cases := []struct {
		name string
		job  *ibjv1.IndexedBatchJob
		want *corev1.Service
	}{
		{name: "a job without network has no Service", job: base.Clone().Obj()},
		{
			name: "a job with enableDNSHostnames false has no Service",
			job: func() *ibjv1.IndexedBatchJob {
				j := base.Clone().Obj()
				j.Spec.Network = &ibjv1.Network{EnableDNSHostnames: ptr.To(false)}
				return j
			}(),
		},
		{name: "the Service takes the job's name by default", job: base.Clone().PeerDNS("").Obj(), want: headless("tf")},
		{name: "network.subdomain names the Service", job: base.Clone().PeerDNS("workers").Obj(), want: headless("workers")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, newService(tc.job)); diff != "" {
				t.Errorf("service (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewPodJoinsTheHeadlessServiceSubdomain(t *testing.T) {
	base := harness.MakeIndexedBatchJob("tf", "ns").UID("job-uid").Completions(2).Parallelism(2)
	cases := []struct {
		name          string
		job           *ibjv1.IndexedBatchJob
		wantSubdomain string
	}{
		{name: "without peer DNS the template's subdomain is kept", job: base.Clone().Subdomain("mine").Obj(), wantSubdomain: "mine"},
		{name: "peer DNS without network.subdomain: the job's name", job: base.Clone().PeerDNS("").Obj(), wantSubdomain: "tf"},
		{name: "peer DNS with network.subdomain", job: base.Clone().PeerDNS("workers").Obj(), wantSubdomain: "workers"},
		{name: "a template subdomain equal to the Service's name", job: base.Clone().PeerDNS("workers").Subdomain("workers").Obj(), wantSubdomain: "workers"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := podbuild.New(tc.job, podbuild.Spec{Index: 1})
			got := [2]string{pod.Spec.Hostname, pod.Spec.Subdomain}
			if diff := cmp.Diff([2]string{"tf-1", tc.wantSubdomain}, got); diff != "" {
				t.Errorf("[hostname, subdomain] (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSyncJobReportsPeerDNS runs the core with what the reconciler found of
// the job's Service: the condition, the events, the recheck of a taken
// name, and the pods, which start whatever the Service's state.
func TestSyncJobReportsPeerDNS(t *testing.T) {
	type outcome struct {
		Conditions   []metav1.Condition
		Create       []string
		Events       []string
		RequeueAfter time.Duration
	}
	earlier := testNow.Add(-time.Hour)
	ready := metav1.Condition{Type: ibjv1.ConditionPeerDNSReady, Status: metav1.ConditionTrue, Reason: ibjv1.ReasonServiceCreated,
		Message: "Headless service tf resolves the pod of index i as tf-<i>.tf", LastTransitionTime: metav1.NewTime(testNow)}
	readyEarlier := ready
	readyEarlier.LastTransitionTime = metav1.NewTime(earlier)
	taken := metav1.Condition{Type: ibjv1.ConditionPeerDNSReady, Status: metav1.ConditionFalse, Reason: ibjv1.ReasonServiceNameTaken,
		Message: "Service tf exists and is not controlled by this job: the operator leaves it unchanged, and tf-<i>.tf resolves only " +
			"if that Service selects the pods. Delete it, or recreate the job with another network.subdomain",
		LastTransitionTime: metav1.NewTime(testNow)}
	takenEarlier := taken
	takenEarlier.LastTransitionTime = metav1.NewTime(earlier)
	failed := metav1.Condition{Type: ibjv1.ConditionPeerDNSReady, Status: metav1.ConditionFalse, Reason: ibjv1.ReasonServiceCreateFailed,
		Message: "Error creating headless service tf: exceeded quota", LastTransitionTime: metav1.NewTime(testNow)}
	pods := []string{"tf-0-0 failures=0 ignored=0", "tf-1-0 failures=0 ignored=0"}

	cases := []struct {
		name    string
		before  []metav1.Condition
		service peerService
		want    outcome
	}{
		{name: "a job without peer DNS has no condition", want: outcome{Create: pods}},
		{
			name:    "the Service created: PeerDNSReady True, with an event",
			service: peerService{name: "tf", state: serviceOwned},
			want: outcome{Conditions: []metav1.Condition{ready}, Create: pods,
				Events: []string{"Normal ServiceCreated: " + ready.Message}},
		},
		{
			name:    "the Service still there: no event, the transition time kept",
			before:  []metav1.Condition{readyEarlier},
			service: peerService{name: "tf", state: serviceOwned},
			want:    outcome{Conditions: []metav1.Condition{readyEarlier}, Create: pods},
		},
		{
			name:    "the name taken: PeerDNSReady False with a warning, the pods start all the same, a recheck in 30s",
			service: peerService{name: "tf", state: serviceNameTaken},
			want: outcome{Conditions: []metav1.Condition{taken}, Create: pods,
				Events: []string{"Warning ServiceNameTaken: " + taken.Message}, RequeueAfter: serviceRecheckInterval},
		},
		{
			name:    "the name still taken: no second warning, another recheck",
			before:  []metav1.Condition{takenEarlier},
			service: peerService{name: "tf", state: serviceNameTaken},
			want:    outcome{Conditions: []metav1.Condition{takenEarlier}, Create: pods, RequeueAfter: serviceRecheckInterval},
		},
		{
			name:    "the name freed and the Service created",
			before:  []metav1.Condition{takenEarlier},
			service: peerService{name: "tf", state: serviceOwned},
			want: outcome{Conditions: []metav1.Condition{ready}, Create: pods,
				Events: []string{"Normal ServiceCreated: " + ready.Message}},
		},
		{
			name:    "a create the API server refused: its message, with a warning",
			service: peerService{name: "tf", state: serviceCreateFailed, err: "exceeded quota"},
			want: outcome{Conditions: []metav1.Condition{failed}, Create: pods,
				Events: []string{"Warning ServiceCreateFailed: " + failed.Message}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := harness.MakeIndexedBatchJob("tf", "ns").Completions(2).Parallelism(2).PeerDNS("").Obj()
			job.Status.Conditions = tc.before
			d := decisionOf(job, syncJob(syncInput{job: job, now: testNow, backoff: jobpod.DefaultBackoff, expectationsSatisfied: true, service: tc.service}))
			got := outcome{Conditions: d.Status.Conditions, Create: d.Create, Events: d.Events, RequeueAfter: d.RequeueAfter}
			if diff := cmp.Diff(tc.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("outcome (-want +got):\n%s", diff)
			}
		})
	}
}

// serviceWorld is an API server (a fake client) as ensureService meets it:
// through the manager's cache, which holds only Services labelled as the
// operator's and may not show the latest create yet, and through the API
// reader. It records the requests that reach the API server.
type serviceWorld struct {
	api   client.WithWatch
	calls []string
	// lagging hides the operator's Services from the cache, as between a
	// create and its watch event.
	lagging   bool
	createErr error
}

func newServiceWorld(t *testing.T, objs ...client.Object) *serviceWorld {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := ibjv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return &serviceWorld{api: fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).Build()}
}

// reconciler is a Reconciler whose client reads through the cache and
// whose apiReader reads the API server.
func (w *serviceWorld) reconciler(clk *testingclock.FakeClock) *Reconciler {
	cached := interceptor.NewClient(w.api, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if obj.GetLabels()[ibjv1.ControllerUIDLabel] == "" || w.lagging {
				return apierrors.NewNotFound(schema.GroupResource{Resource: "services"}, key.Name)
			}
			return nil
		},
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			w.calls = append(w.calls, "create "+obj.GetName())
			if w.createErr != nil {
				return w.createErr
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	r := NewReconciler(cached, nil, clk, jobpod.DefaultBackoff)
	r.apiReader = interceptor.NewClient(w.api, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			w.calls = append(w.calls, "get "+key.Name)
			return c.Get(ctx, key, obj, opts...)
		},
	})
	return r
}

// service returns the Service as the API server holds it, nil if absent.
func (w *serviceWorld) service(t *testing.T, name string) *corev1.Service {
	t.Helper()
	svc := &corev1.Service{}
	if err := w.api.Get(context.Background(), client.ObjectKey{Namespace: "ns", Name: name}, svc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return svc
}

// ignoreServerFields leaves out what the API server adds to a stored object.
var ignoreServerFields = cmp.Options{
	cmpopts.IgnoreFields(metav1.ObjectMeta{}, "ResourceVersion"),
	cmpopts.IgnoreTypes(metav1.TypeMeta{}),
}

func TestEnsureService(t *testing.T) {
	job := harness.MakeIndexedBatchJob("tf", "ns").UID("job-uid").Completions(2).Parallelism(2).PeerDNS("").Obj()
	ours := newService(job)
	otherJob := harness.MakeIndexedBatchJob("other", "ns").UID("other-uid").PeerDNS("tf").Obj()
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "tf", Namespace: "ns", Labels: map[string]string{"app": "tf"}},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "tf"}},
	}
	finished := job.DeepCopy()
	finished.Status.Conditions = []metav1.Condition{{Type: ibjv1.ConditionComplete, Status: metav1.ConditionTrue}}

	cases := []struct {
		name      string
		job       *ibjv1.IndexedBatchJob
		existing  *corev1.Service
		lagging   bool
		createErr error
		want      peerService
		wantErr   bool
		// wantCalls are the requests past the cache.
		wantCalls []string
		// wantServer is the Service tf on the API server afterwards.
		wantServer *corev1.Service
	}{
		{
			name: "a job without peer DNS: nothing asked, nothing created",
			job:  harness.MakeIndexedBatchJob("tf", "ns").UID("job-uid").Obj(),
		},
		{name: "a finished job gets no Service", job: finished},
		{
			name: "no Service yet: created", job: job,
			want: peerService{name: "tf", state: serviceOwned}, wantCalls: []string{"create tf"}, wantServer: ours,
		},
		{
			name: "its Service in the cache: nothing written", job: job, existing: ours.DeepCopy(),
			want: peerService{name: "tf", state: serviceOwned}, wantServer: ours,
		},
		{
			name: "its Service created earlier and not in the cache yet: read from the API server, not taken", job: job,
			existing: ours.DeepCopy(), lagging: true,
			want: peerService{name: "tf", state: serviceOwned}, wantCalls: []string{"create tf", "get tf"}, wantServer: ours,
		},
		{
			name: "a Service without the operator's label: taken, left unchanged", job: job, existing: foreign.DeepCopy(),
			want: peerService{name: "tf", state: serviceNameTaken}, wantCalls: []string{"create tf", "get tf"}, wantServer: foreign,
		},
		{
			name: "another job's Service of the name: taken, left unchanged", job: job, existing: newService(otherJob),
			want: peerService{name: "tf", state: serviceNameTaken}, wantServer: newService(otherJob),
		},
		{
			name: "a create the API server refuses: its message, and the error for a retry", job: job,
			createErr: apierrors.NewForbidden(schema.GroupResource{Resource: "services"}, "tf", errors.New("exceeded quota: services=1")),
			want:      peerService{name: "tf", state: serviceCreateFailed, err: `services "tf" is forbidden: exceeded quota: services=1`},
			wantErr:   true, wantCalls: []string{"create tf"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var objs []client.Object
			if tc.existing != nil {
				objs = append(objs, tc.existing)
			}
			w := newServiceWorld(t, objs...)
			w.lagging, w.createErr = tc.lagging, tc.createErr
			got, err := w.reconciler(testingclock.NewFakeClock(testNow)).ensureService(context.Background(), tc.job)
			if (err != nil) != tc.wantErr {
				t.Errorf("error = %v, want error %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(peerService{})); diff != "" {
				t.Errorf("found (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantCalls, w.calls); diff != "" {
				t.Errorf("API calls (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantServer, w.service(t, "tf"), ignoreServerFields); diff != "" {
				t.Errorf("Service on the API server (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEnsureServiceRechecksATakenNameAfterTheInterval: a taken name is not
// asked about again for serviceRecheckInterval; after it, a name that was
// freed gets the job's Service.
func TestEnsureServiceRechecksATakenNameAfterTheInterval(t *testing.T) {
	job := harness.MakeIndexedBatchJob("tf", "ns").UID("job-uid").PeerDNS("").Obj()
	foreign := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "tf", Namespace: "ns"}}
	w := newServiceWorld(t, foreign)
	clk := testingclock.NewFakeClock(testNow)
	r := w.reconciler(clk)
	ctx := context.Background()
	ensure := func(wantState serviceState, wantCalls ...string) {
		t.Helper()
		w.calls = nil
		got, err := r.ensureService(ctx, job)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(peerService{name: "tf", state: wantState}, got, cmp.AllowUnexported(peerService{})); diff != "" {
			t.Errorf("found (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff(wantCalls, w.calls); diff != "" {
			t.Errorf("API calls (-want +got):\n%s", diff)
		}
	}

	ensure(serviceNameTaken, "create tf", "get tf")
	clk.Step(serviceRecheckInterval - time.Second)
	ensure(serviceNameTaken)
	if err := w.api.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	clk.Step(time.Second)
	ensure(serviceOwned, "create tf")
	if diff := cmp.Diff(newService(job), w.service(t, "tf"), ignoreServerFields); diff != "" {
		t.Errorf("Service on the API server (-want +got):\n%s", diff)
	}
}
