package kueue

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	configapi "sigs.k8s.io/kueue/apis/config/v1beta2"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	schdcache "sigs.k8s.io/kueue/pkg/cache/scheduler"
	"sigs.k8s.io/kueue/pkg/controller/constants"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"
	"sigs.k8s.io/kueue/pkg/metrics"
)

// DefaultManagedJobsNamespaceSelector is Kueue's default
// managedJobsNamespaceSelector for a Kueue installed in kueue-system, as a
// label selector string: every namespace but kube-system and Kueue's own.
const DefaultManagedJobsNamespaceSelector = "kubernetes.io/metadata.name notin (kube-system,kueue-system)"

// Settings are the two fields of Kueue's Configuration that say which jobs
// Kueue manages. The operator does not read them from Kueue's ConfigMap
// (docs/kueue.md says why): its flags repeat them, and must say what the
// Configuration of the Kueue in the cluster says, or the operator queues
// jobs that Kueue's own integrations would not, and the other way round.
type Settings struct {
	// ManageJobsWithoutQueueName is manageJobsWithoutQueueName: a job
	// without the kueue.x-k8s.io/queue-name label is Kueue's too (and waits
	// suspended, with a Workload that no LocalQueue admits, unless the
	// namespace has a LocalQueue named "default").
	ManageJobsWithoutQueueName bool
	// ManagedJobsNamespaceSelector is managedJobsNamespaceSelector: Kueue
	// manages no job in a namespace whose labels it does not match, with or
	// without a queue name. Nil is Kueue's default,
	// DefaultManagedJobsNamespaceSelector.
	ManagedJobsNamespaceSelector labels.Selector
}

// ParseSettings returns the Settings of manageJobsWithoutQueueName and of
// namespaceSelector, a label selector string (as kubectl's --selector:
// "team in (a,b),!legacy"; empty selects every namespace, as an empty
// managedJobsNamespaceSelector does).
func ParseSettings(manageJobsWithoutQueueName bool, namespaceSelector string) (Settings, error) {
	selector, err := labels.Parse(namespaceSelector)
	if err != nil {
		return Settings{}, fmt.Errorf("%q is not a label selector: %w", namespaceSelector, err)
	}
	return Settings{ManageJobsWithoutQueueName: manageJobsWithoutQueueName, ManagedJobsNamespaceSelector: selector}, nil
}

// withDefaults fills in Kueue's default selector when s has none.
func (s Settings) withDefaults() Settings {
	if s.ManagedJobsNamespaceSelector == nil {
		selector, err := labels.Parse(DefaultManagedJobsNamespaceSelector)
		if err != nil {
			panic(err) // a constant
		}
		s.ManagedJobsNamespaceSelector = selector
	}
	return s
}

// reconcilerOptions are the jobframework options Kueue's manager builds
// from the same two fields for its own integrations, and its
// waitForPodsReady: on in every Kueue since v0.19 (only a feature gate,
// DisableWaitForPodsReady, turns it off), it evicts an admitted job whose
// Workload does not get the PodsReady condition in time, and that condition
// is the job reconciler's to set. Where Kueue does not wait for it, the
// condition is set all the same and read by nobody. The cache is only for
// the reconciler's local queue metrics, which Kueue's manager reports: an
// empty one, with them off, keeps the reconciler from reporting them twice.
func (s Settings) reconcilerOptions() []jobframework.Option {
	return []jobframework.Option{
		jobframework.WithManageJobsWithoutQueueName(s.ManageJobsWithoutQueueName),
		jobframework.WithManagedJobsNamespaceSelector(s.ManagedJobsNamespaceSelector),
		jobframework.WithWaitForPodsReady(&configapi.WaitForPodsReady{}),
		jobframework.WithCache(schdcache.New(nil, schdcache.WithLocalQueueMetrics(&metrics.LocalQueueMetricsConfig{Enabled: false}))),
	}
}

// Manages reports whether Kueue manages a job (not part of another job
// Kueue manages) with queueName in a namespace labelled namespaceLabels, as
// Kueue's generic job reconciler decides it: never outside the namespace
// selector (the selector binds jobs with a queue name too since Kueue
// v0.19, ManagedJobsNamespaceSelectorAlwaysRespected); inside it, a job with
// a queue name, and any job with ManageJobsWithoutQueueName. The defaulting
// webhook suspends at creation exactly the jobs it manages, so that none
// waits suspended for a reconciler that leaves it alone.
func (s Settings) Manages(namespaceLabels labels.Set, queueName string) bool {
	if !s.ManagedJobsNamespaceSelector.Matches(namespaceLabels) {
		return false
	}
	return queueName != "" || s.ManageJobsWithoutQueueName
}

// What the defaulting webhook reads to apply Kueue's settings: the job's
// namespace and whether it has a LocalQueue named "default".
//
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=localqueues,verbs=get

// defaultJob applies to a new job what Kueue's job webhook applies to a
// new batch/v1 Job, with s: in a namespace the selector leaves out,
// nothing; else a job without a queue name gets the queue name "default"
// when the namespace has a LocalQueue of that name; then a job Kueue
// manages (Manages) is suspended, unless it is part of a job Kueue already
// manages. c reads the namespace and the LocalQueue; a failure to read
// them is the error, so that a job meant for Kueue never starts unqueued.
func (s Settings) defaultJob(ctx context.Context, c client.Client, job *Job) error {
	namespaceLabels, err := s.namespaceLabels(ctx, c, job.Namespace)
	if err != nil {
		return err
	}
	if !s.ManagedJobsNamespaceSelector.Matches(namespaceLabels) {
		return nil
	}
	if jobframework.QueueName(job) == "" {
		var getErr error
		exists := func(namespace string) bool {
			var ok bool
			ok, getErr = defaultLocalQueueExists(ctx, c, namespace)
			return ok
		}
		// The namespace matched above: no selector for Kueue to check again.
		if err := jobframework.ApplyDefaultLocalQueueWithManagedJobsNamespaceSelector(ctx, c, job.Object(), exists, nil); err != nil {
			return err
		}
		if getErr != nil {
			return getErr
		}
	}
	if !s.Manages(namespaceLabels, string(jobframework.QueueName(job))) {
		return nil
	}
	if err := defaultManagedBy(ctx, c, job); err != nil {
		return err
	}
	return jobframework.ApplyDefaultForSuspend(ctx, job, c, s.ManageJobsWithoutQueueName, nil)
}

// What the defaulting webhook reads to hand a job to MultiKueue.
//
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=clusterqueues;admissionchecks,verbs=get

// defaultManagedBy hands a new job to MultiKueue as Kueue's job webhook
// hands a batch/v1 Job: a job this operator would run (CanDefaultManagedBy)
// whose queue (its LocalQueue's ClusterQueue) has an AdmissionCheck of
// MultiKueue's controller gets spec.managedBy kueue.x-k8s.io/multikueue,
// so that the operator here leaves it to the worker MultiKueue dispatches
// it to. A LocalQueue, ClusterQueue or AdmissionCheck that does not exist
// leaves the job as it is, as Kueue's webhook does; a failure to read one
// is the error, so that a job meant for another cluster never runs here.
func defaultManagedBy(ctx context.Context, c client.Client, job *Job) error {
	queue := jobframework.QueueName(job)
	if queue == "" || !job.CanDefaultManagedBy() {
		return nil
	}
	lq := &kueuev1beta2.LocalQueue{}
	if found, err := get(ctx, c, "LocalQueue", " for MultiKueue", client.ObjectKey{Namespace: job.Namespace, Name: string(queue)}, lq); !found {
		return err
	}
	cq := &kueuev1beta2.ClusterQueue{}
	if found, err := get(ctx, c, "ClusterQueue", " for MultiKueue", client.ObjectKey{Name: string(lq.Spec.ClusterQueue)}, cq); !found {
		return err
	}
	for _, name := range admissionChecksOf(cq) {
		ac := &kueuev1beta2.AdmissionCheck{}
		found, err := get(ctx, c, "AdmissionCheck", " for MultiKueue", client.ObjectKey{Name: string(name)}, ac)
		if err != nil {
			return err
		}
		if found && ac.Spec.ControllerName == kueuev1beta2.MultiKueueControllerName {
			job.SetManagedBy(ptr.To(kueuev1beta2.MultiKueueControllerName))
			return nil
		}
	}
	return nil
}

// admissionChecksOf are the AdmissionChecks of a ClusterQueue, for any of
// its flavors.
func admissionChecksOf(cq *kueuev1beta2.ClusterQueue) []kueuev1beta2.AdmissionCheckReference {
	if cq.Spec.AdmissionChecksStrategy == nil {
		return nil
	}
	var names []kueuev1beta2.AdmissionCheckReference
	for _, rule := range cq.Spec.AdmissionChecksStrategy.AdmissionChecks {
		names = append(names, rule.Name)
	}
	return names
}

// get reads the kind's object key into obj, for what: found, or not found
// (nil error; also when Kueue's API is not served), or the error of the
// read.
func get(ctx context.Context, c client.Client, kind, what string, key client.ObjectKey, obj client.Object) (bool, error) {
	err := c.Get(ctx, key, obj)
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
		return false, nil
	default:
		return false, fmt.Errorf("reading %s %s%s: %w", kind, key, what, err)
	}
}

// namespaceLabels are the labels of namespace, or none when the selector
// matches every namespace anyway (no read then).
func (s Settings) namespaceLabels(ctx context.Context, c client.Client, namespace string) (labels.Set, error) {
	if s.ManagedJobsNamespaceSelector.Empty() {
		return nil, nil
	}
	ns := &corev1.Namespace{}
	if err := c.Get(ctx, client.ObjectKey{Name: namespace}, ns); err != nil {
		return nil, fmt.Errorf("reading namespace %s for Kueue's managedJobsNamespaceSelector: %w", namespace, err)
	}
	return ns.Labels, nil
}

// defaultLocalQueueExists reports whether namespace has a LocalQueue named
// "default", which Kueue gives a job without a queue name. Before Kueue's
// API is served there is none.
func defaultLocalQueueExists(ctx context.Context, c client.Client, namespace string) (bool, error) {
	key := client.ObjectKey{Namespace: namespace, Name: string(constants.DefaultLocalQueueName)}
	return get(ctx, c, "LocalQueue", "", key, &kueuev1beta2.LocalQueue{})
}
