package kueue

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	utiltesting "sigs.k8s.io/kueue/pkg/util/testing"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
)

const queueNameLabel = "kueue.x-k8s.io/queue-name"

// A namespace Kueue's default selector matches, and one it leaves out.
var (
	teamNamespace  = namespace("team-a")
	kueueNamespace = namespace("kueue-system")
)

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: name, Labels: map[string]string{corev1.LabelMetadataName: name},
	}}
}

func TestParseSettings(t *testing.T) {
	cases := []struct {
		selector string
		matches  []string
		misses   []string
		wantErr  string
	}{
		{selector: DefaultManagedJobsNamespaceSelector, matches: []string{"team-a", "default"}, misses: []string{"kube-system", "kueue-system"}},
		{selector: "", matches: []string{"team-a", "kube-system"}},
		{selector: "kubernetes.io/metadata.name in (team-a)", matches: []string{"team-a"}, misses: []string{"team-b"}},
		{selector: "name notin kube-system", wantErr: `"name notin kube-system" is not a label selector`},
		{selector: "Bad Key=1", wantErr: `"Bad Key=1" is not a label selector`},
	}
	for _, tc := range cases {
		t.Run(tc.selector, func(t *testing.T) {
			s, err := ParseSettings(true, tc.selector)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !s.ManageJobsWithoutQueueName {
				t.Error("manageJobsWithoutQueueName lost")
			}
			for _, name := range tc.matches {
				if !s.ManagedJobsNamespaceSelector.Matches(labels.Set(namespace(name).Labels)) {
					t.Errorf("namespace %s not selected", name)
				}
			}
			for _, name := range tc.misses {
				if s.ManagedJobsNamespaceSelector.Matches(labels.Set(namespace(name).Labels)) {
					t.Errorf("namespace %s selected", name)
				}
			}
		})
	}
}

func TestZeroSettingsAreKueuesDefaults(t *testing.T) {
	got := Settings{}.withDefaults()
	if got.ManageJobsWithoutQueueName {
		t.Error("manageJobsWithoutQueueName is on")
	}
	if want := DefaultManagedJobsNamespaceSelector; got.ManagedJobsNamespaceSelector.String() != want {
		t.Errorf("selector %q, want %q", got.ManagedJobsNamespaceSelector, want)
	}
}

// decisionCases is the table of setting × namespace × queue name, with
// whether Kueue manages the job.
var decisionCases = []struct {
	name        string
	manage      bool
	namespace   *corev1.Namespace
	queueName   string
	wantManaged bool
}{
	{"setting off, selected namespace, queue name", false, teamNamespace, "queue", true},
	{"setting off, selected namespace, no queue name", false, teamNamespace, "", false},
	{"setting off, unselected namespace, queue name", false, kueueNamespace, "queue", false},
	{"setting off, unselected namespace, no queue name", false, kueueNamespace, "", false},
	{"setting on, selected namespace, queue name", true, teamNamespace, "queue", true},
	{"setting on, selected namespace, no queue name", true, teamNamespace, "", true},
	{"setting on, unselected namespace, queue name", true, kueueNamespace, "queue", false},
	{"setting on, unselected namespace, no queue name", true, kueueNamespace, "", false},
}

func TestManages(t *testing.T) {
	for _, tc := range decisionCases {
		t.Run(tc.name, func(t *testing.T) {
			s := Settings{ManageJobsWithoutQueueName: tc.manage}.withDefaults()
			if got := s.Manages(labels.Set(tc.namespace.Labels), tc.queueName); got != tc.wantManaged {
				t.Errorf("Manages = %v, want %v", got, tc.wantManaged)
			}
		})
	}
}

// TestKueuesReconcilerAgreesWithManages runs Kueue's generic job reconciler
// with the same settings on a job that runs (created where the webhook did
// not suspend it): it makes a Workload and suspends the job exactly when
// Manages says Kueue manages it, so that the webhook, which follows Manages,
// never suspends a job the reconciler leaves alone.
func TestKueuesReconcilerAgreesWithManages(t *testing.T) {
	for _, tc := range decisionCases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			builder := utiltesting.NewClientBuilder(ibjv1.AddToScheme)
			if err := jobframework.SetupWorkloadOwnerIndex(ctx, utiltesting.AsIndexer(builder), GVK); err != nil {
				t.Fatal(err)
			}
			job := labelledJob(tc.namespace.Name, tc.queueName, false)
			c := builder.WithObjects(teamNamespace, kueueNamespace, job).
				WithStatusSubresource(&kueuev1beta2.Workload{}, &ibjv1.IndexedBatchJob{}).Build()
			s := Settings{ManageJobsWithoutQueueName: tc.manage}.withDefaults()
			r := jobframework.NewReconciler(c, &utiltesting.EventRecorder{}, s.reconcilerOptions()...)
			// The first sync suspends the job, the next makes its Workload.
			for range 3 {
				if _, err := r.ReconcileGenericJob(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(job)}, NewJob()); err != nil {
					t.Fatal(err)
				}
			}
			var workloads kueuev1beta2.WorkloadList
			if err := c.List(ctx, &workloads, client.InNamespace(job.Namespace)); err != nil {
				t.Fatal(err)
			}
			got := &ibjv1.IndexedBatchJob{}
			if err := c.Get(ctx, client.ObjectKeyFromObject(job), got); err != nil {
				t.Fatal(err)
			}
			type outcome struct{ Workloads, Suspended bool }
			managed := s.Manages(labels.Set(tc.namespace.Labels), tc.queueName)
			want := outcome{Workloads: managed, Suspended: managed}
			if diff := cmp.Diff(want, outcome{len(workloads.Items) > 0, ptr.Deref(got.Spec.Suspend, false)}); diff != "" {
				t.Errorf("Kueue's reconciler (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaulterAppliesKueuesSettings(t *testing.T) {
	type outcome struct {
		Suspended bool
		QueueName string
	}
	type row struct {
		name         string
		manage       bool
		namespace    *corev1.Namespace
		queueName    string
		defaultQueue bool
		want         outcome
	}
	var cases []row
	for _, tc := range decisionCases {
		cases = append(cases, row{tc.name, tc.manage, tc.namespace, tc.queueName, false,
			outcome{Suspended: tc.wantManaged, QueueName: tc.queueName}})
	}
	cases = append(cases,
		row{"default LocalQueue, setting off: queued there", false, teamNamespace, "", true, outcome{true, "default"}},
		row{"default LocalQueue, setting on: queued there", true, teamNamespace, "", true, outcome{true, "default"}},
		row{"default LocalQueue, a queue name of its own: kept", true, teamNamespace, "queue", true, outcome{true, "queue"}},
		row{"default LocalQueue in an unselected namespace: left alone", true, kueueNamespace, "", true, outcome{false, ""}},
	)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := []client.Object{teamNamespace, kueueNamespace}
			if tc.defaultQueue {
				objs = append(objs, &kueuev1beta2.LocalQueue{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: tc.namespace.Name}})
			}
			c := utiltesting.NewClientBuilder(ibjv1.AddToScheme).WithObjects(objs...).Build()
			i := &Integration{mode: kueueapi.ModeEnabled, settings: Settings{ManageJobsWithoutQueueName: tc.manage}.withDefaults()}
			job := labelledJob(tc.namespace.Name, tc.queueName, false)
			if err := i.Defaulter(c)(context.Background(), job); err != nil {
				t.Fatal(err)
			}
			got := outcome{Suspended: ptr.Deref(job.Spec.Suspend, false), QueueName: job.Labels[queueNameLabel]}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("defaulted job (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDefaulterFailsWhenItCannotReadTheNamespace(t *testing.T) {
	c := utiltesting.NewClientBuilder(ibjv1.AddToScheme).Build()
	i := &Integration{mode: kueueapi.ModeEnabled, settings: Settings{ManageJobsWithoutQueueName: true}.withDefaults()}
	err := i.Defaulter(c)(context.Background(), labelledJob("gone", "", false))
	if err == nil || !strings.Contains(err.Error(), "reading namespace gone for Kueue's managedJobsNamespaceSelector") {
		t.Fatalf("error %v, want one about the namespace", err)
	}
}

func TestDefaulterDoesNothingWhileInactive(t *testing.T) {
	i := &Integration{mode: kueueapi.ModeAuto, settings: Settings{ManageJobsWithoutQueueName: true}.withDefaults()}
	job := labelledJob("team-a", "queue", false)
	// No client: it reads nothing.
	if err := i.Defaulter(nil)(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if ptr.Deref(job.Spec.Suspend, false) {
		t.Error("suspended")
	}
}

// labelledJob is a job in namespace, with queueName unless it is empty,
// and spec.suspend set to suspend.
func labelledJob(namespace, queueName string, suspend bool) *ibjv1.IndexedBatchJob {
	w := harness.MakeIndexedBatchJob("job", namespace).Completions(2).Parallelism(2).UID("job-uid")
	if queueName != "" {
		w = w.Label(queueNameLabel, queueName)
	}
	j := w.Obj()
	j.Spec.Suspend = ptr.To(suspend)
	return j
}

func TestDefaulterHandsJobsOfMultiKueueQueuesToMultiKueue(t *testing.T) {
	const multiKueue = kueuev1beta2.MultiKueueControllerName
	queue := func(name, cq string) *kueuev1beta2.LocalQueue {
		return &kueuev1beta2.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: teamNamespace.Name},
			Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: kueuev1beta2.ClusterQueueReference(cq)},
		}
	}
	clusterQueue := func(name string, checks ...string) *kueuev1beta2.ClusterQueue {
		cq := &kueuev1beta2.ClusterQueue{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if len(checks) > 0 {
			cq.Spec.AdmissionChecksStrategy = &kueuev1beta2.AdmissionChecksStrategy{}
			for _, c := range checks {
				cq.Spec.AdmissionChecksStrategy.AdmissionChecks = append(cq.Spec.AdmissionChecksStrategy.AdmissionChecks,
					kueuev1beta2.AdmissionCheckStrategyRule{Name: kueuev1beta2.AdmissionCheckReference(c)})
			}
		}
		return cq
	}
	check := func(name, controller string) *kueuev1beta2.AdmissionCheck {
		return &kueuev1beta2.AdmissionCheck{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: kueuev1beta2.AdmissionCheckSpec{ControllerName: controller}}
	}
	world := []client.Object{
		teamNamespace, kueueNamespace,
		queue("mk", "mk-cq"), clusterQueue("mk-cq", "provisioning", "multikueue"),
		check("provisioning", "kueue.x-k8s.io/provisioning-request"), check("multikueue", multiKueue),
		queue("local", "local-cq"), clusterQueue("local-cq", "provisioning"),
		queue("plain", "plain-cq"), clusterQueue("plain-cq"),
		queue("dangling-cq", "no-such-cq"),
		queue("dangling-check", "dangling-check-cq"), clusterQueue("dangling-check-cq", "no-such-check"),
	}
	cases := []struct {
		name      string
		queue     string
		managedBy *string
		want      *string
	}{
		{"a MultiKueue queue: MultiKueue's", "mk", nil, ptr.To(multiKueue)},
		{"a MultiKueue queue, managedBy the operator: MultiKueue's", "mk", ptr.To(ibjv1.ControllerName), ptr.To(multiKueue)},
		{"a MultiKueue queue, managedBy another controller: kept", "mk", ptr.To("example.com/other"), ptr.To("example.com/other")},
		{"a queue with another admission check: unset", "local", nil, nil},
		{"a queue without admission checks: unset", "plain", nil, nil},
		{"no queue name: unset", "", nil, nil},
		{"a LocalQueue that does not exist: unset", "no-such-queue", nil, nil},
		{"a ClusterQueue that does not exist: unset", "dangling-cq", nil, nil},
		{"an AdmissionCheck that does not exist: unset", "dangling-check", nil, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := utiltesting.NewClientBuilder(ibjv1.AddToScheme).WithObjects(world...).Build()
			i := &Integration{mode: kueueapi.ModeEnabled, settings: Settings{}.withDefaults()}
			job := labelledJob(teamNamespace.Name, tc.queue, false)
			job.Spec.ManagedBy = tc.managedBy
			if err := i.Defaulter(c)(context.Background(), job); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, job.Spec.ManagedBy); diff != "" {
				t.Errorf("managedBy (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("in a namespace Kueue leaves alone: unset", func(t *testing.T) {
		objs := append([]client.Object{}, world...)
		objs = append(objs, &kueuev1beta2.LocalQueue{
			ObjectMeta: metav1.ObjectMeta{Name: "mk", Namespace: kueueNamespace.Name},
			Spec:       kueuev1beta2.LocalQueueSpec{ClusterQueue: "mk-cq"},
		})
		c := utiltesting.NewClientBuilder(ibjv1.AddToScheme).WithObjects(objs...).Build()
		i := &Integration{mode: kueueapi.ModeEnabled, settings: Settings{}.withDefaults()}
		job := labelledJob(kueueNamespace.Name, "mk", false)
		if err := i.Defaulter(c)(context.Background(), job); err != nil {
			t.Fatal(err)
		}
		if job.Spec.ManagedBy != nil {
			t.Errorf("managedBy %q", *job.Spec.ManagedBy)
		}
	})
}
