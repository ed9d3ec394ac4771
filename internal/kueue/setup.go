package kueue

import (
	"context"
	"fmt"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
)

// AddToScheme adds Kueue's API to scheme, which costs nothing while the
// integration does not run.
func AddToScheme(scheme *runtime.Scheme) error { return kueuev1beta2.AddToScheme(scheme) }

// Integration is the integration as the rest of the operator sees it.
type Integration struct {
	mode   string
	active atomic.Bool
}

// Active reports whether jobs labelled with a queue name are Kueue's: with
// kueueapi.ModeEnabled always, with kueueapi.ModeAuto once Kueue's API was found.
func (i *Integration) Active() bool {
	return i != nil && (i.mode == kueueapi.ModeEnabled || i.active.Load())
}

// Setup starts the integration in mode: once Kueue's Workload API is
// served, Kueue's generic job reconciler runs for IndexedBatchJobs in mgr
// (as the leader's controllers do). It waits for the API on every replica,
// leader or not, since the defaulting webhook every replica serves asks
// Active. It returns a nil Integration for kueueapi.ModeDisabled.
func Setup(mgr ctrl.Manager, mode string) (*Integration, error) {
	if err := kueueapi.CheckMode(mode); err != nil || mode == kueueapi.ModeDisabled {
		return nil, err
	}
	i := &Integration{mode: mode}
	return i, mgr.Add(waitForKueue{mgr: mgr, integration: i})
}

// waitForKueue sets the integration up once Kueue's API is served.
type waitForKueue struct {
	mgr         ctrl.Manager
	integration *Integration
}

// NeedLeaderElection is false: see Setup.
func (waitForKueue) NeedLeaderElection() bool { return false }

// Start waits for Kueue's API, then sets up the reconciler.
func (w waitForKueue) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("kueue")
	var setupErr error
	jobframework.WaitForAPI(ctx, w.mgr, log, kueueapi.WorkloadGVK, func() {
		if setupErr = SetupReconciler(ctx, w.mgr); setupErr != nil {
			return
		}
		w.integration.active.Store(true)
		log.Info("Kueue's API is served: IndexedBatchJobs labelled kueue.x-k8s.io/queue-name are queued by Kueue")
	})
	if setupErr != nil {
		return fmt.Errorf("setting up the Kueue integration: %w", setupErr)
	}
	<-ctx.Done()
	return nil
}

// What Kueue's generic job reconciler reads and writes: the Workload of each
// job, the priority classes and resource flavors it reads to build or start
// it, the namespace whose labels it checks, and the job it suspends and
// starts.
//
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=workloads/finalizers,verbs=update
// +kubebuilder:rbac:groups=kueue.x-k8s.io,resources=resourceflavors;workloadpriorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups=scheduling.k8s.io,resources=priorityclasses,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=batch.indexedjob.dev,resources=indexedbatchjobs,verbs=update;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupReconciler runs Kueue's generic job reconciler for IndexedBatchJobs
// in mgr, with the Workload index it reads, as Kueue's manager does for a
// built-in integration. Jobs without a queue name are left alone.
func SetupReconciler(ctx context.Context, mgr ctrl.Manager, opts ...jobframework.Option) error {
	if err := jobframework.SetupWorkloadOwnerIndex(ctx, mgr.GetFieldIndexer(), GVK); err != nil {
		return fmt.Errorf("workload owner index: %w", err)
	}
	opts = append([]jobframework.Option{jobframework.WithManageJobsWithoutQueueName(false)}, opts...)
	jr := jobframework.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder(ControllerName), opts...)
	// Not jobframework.NewGenericReconcilerFactory's SetupWithManager, which
	// names the controller after the kind, the name the operator's own
	// controller has.
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&ibjv1.IndexedBatchJob{}).
		Owns(&kueuev1beta2.Workload{}).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return jr.ReconcileGenericJob(ctx, req, NewJob())
		}))
}

// ControllerName names the controller that runs Kueue's reconciler, in
// logs, metrics and the events it records.
const ControllerName = "indexedbatchjob-kueue"

var _ manager.Runnable = waitForKueue{}

// Defaulter returns what Kueue's webhook does to a new job of an
// integration, for the operator's defaulting webhook to apply: while the
// integration is Active, a job labelled kueue.x-k8s.io/queue-name (and not
// part of a job Kueue already manages, which c reads) is created suspended,
// so that it runs only once Kueue admits its Workload.
func (i *Integration) Defaulter(c client.Client) func(context.Context, *ibjv1.IndexedBatchJob) error {
	return func(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
		if !i.Active() {
			return nil
		}
		return jobframework.ApplyDefaultForSuspend(ctx, (*Job)(job), c, false, nil)
	}
}
