package kueue

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"
	"sigs.k8s.io/kueue/pkg/controller/jobframework"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
)

// After a failure the leader tries again, first after firstRetry, then
// after twice the last delay, up to longestRetry: a missing permission or
// an API server that is slow to serve Kueue's API may be fixed without
// restarting the operator.
const (
	firstRetry   = 2 * time.Second
	longestRetry = 5 * time.Minute
)

// workloadSyncTimeout bounds the wait for the first list of Workloads, as
// controller-runtime's CacheSyncTimeout bounds a controller's.
const workloadSyncTimeout = 2 * time.Minute

// runner runs Kueue's reconciler on the leader once Kueue's API is served,
// in a controller it starts itself rather than one the manager starts: a
// controller the manager runs stops the whole manager when it fails,
// which the integration must never do.
type runner struct {
	mgr           ctrl.Manager
	integration   *Integration
	newController func(context.Context, ctrl.Manager, Settings) (manager.Runnable, error)
	events        *eventReporter
	// indexed is set once the Workload owner index is on the cache's
	// informer, which keeps it across attempts (a second one would conflict).
	indexed bool
}

var _ manager.LeaderElectionRunnable = (*runner)(nil)

// NeedLeaderElection is true: Kueue's reconciler writes Workloads and
// jobs, which only the leader may do.
func (*runner) NeedLeaderElection() bool { return true }

// Start waits until Kueue's API is served, then runs the integration until
// ctx ends, starting it again with a growing delay whenever it fails. It
// never returns an error, so that the manager never stops for it.
func (r *runner) Start(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-r.integration.served:
	}
	log := ctrl.LoggerFrom(ctx).WithName("kueue")
	delays := workqueue.NewTypedItemExponentialFailureRateLimiter[string](firstRetry, longestRetry)
	for {
		ran, err := r.run(ctx, log)
		if ctx.Err() != nil {
			return nil
		}
		if ran {
			// It ran, then failed: the delays start over.
			delays.Forget("")
		}
		delay := delays.When("")
		r.integration.setState(StateFailed)
		log.Error(err, "The Kueue integration failed; the rest of the operator runs on, and IndexedBatchJobs "+
			"labelled kueue.x-k8s.io/queue-name wait suspended until it runs; retrying", "retryIn", delay)
		r.events.failed(ctx, err, delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
	}
}

// run sets up the integration's controller and runs it until ctx ends or
// it fails; ran says whether it got as far as running. A panic is an error
// like any other.
func (r *runner) run(ctx context.Context, log logr.Logger) (ran bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	if !r.indexed {
		if err := jobframework.SetupWorkloadOwnerIndex(ctx, r.mgr.GetFieldIndexer(), GVK); err != nil {
			return false, fmt.Errorf("indexing Workloads by owner: %w", err)
		}
		r.indexed = true
	}
	c, err := r.newController(ctx, r.mgr, r.integration.settings)
	if err != nil {
		return false, err
	}
	r.integration.setState(StateRunning)
	log.Info("Started the Kueue integration in this process", "controller", ControllerName)
	r.events.started(ctx)
	if err := c.Start(ctx); err != nil {
		return true, fmt.Errorf("running the %s controller: %w", ControllerName, err)
	}
	if ctx.Err() == nil {
		return true, fmt.Errorf("the %s controller stopped", ControllerName)
	}
	return true, nil
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

// NewController returns the controller that runs Kueue's generic job
// reconciler for IndexedBatchJobs in mgr with Kueue's settings s (a nil
// selector is Kueue's default), as Kueue's manager does for a built-in
// integration, once the Workloads are listed (within workloadSyncTimeout:
// a refusal to list them is its error). The controller is mgr's caches and
// clients, not one of its runnables: its caller starts it. It expects the
// Workload owner index (jobframework.SetupWorkloadOwnerIndex) on mgr's
// cache.
func NewController(ctx context.Context, mgr ctrl.Manager, s Settings) (manager.Runnable, error) {
	if err := waitForWorkloads(ctx, mgr); err != nil {
		return nil, err
	}
	jr := jobframework.NewReconciler(mgr.GetClient(), mgr.GetEventRecorder(ControllerName),
		s.withDefaults().reconcilerOptions()...)
	opts := controller.Options{
		Reconciler: reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			return jr.ReconcileGenericJob(ctx, req, NewJob())
		}),
		// Each attempt after a failure builds it again, under the same name.
		SkipNameValidation: ptr.To(true),
		Logger:             mgr.GetLogger().WithValues("controllerGroup", GVK.Group, "controllerKind", GVK.Kind),
	}
	opts.DefaultFromConfig(mgr.GetControllerOptions())
	// Not ctrl.NewControllerManagedBy, which adds the controller to mgr
	// (and names it after the kind, the name of the operator's own
	// controller).
	c, err := controller.NewUnmanaged(ControllerName, opts)
	if err != nil {
		return nil, err
	}
	if err := c.Watch(source.Kind(mgr.GetCache(), &ibjv1.IndexedBatchJob{},
		&handler.TypedEnqueueRequestForObject[*ibjv1.IndexedBatchJob]{})); err != nil {
		return nil, err
	}
	if err := c.Watch(source.Kind(mgr.GetCache(), &kueuev1beta2.Workload{},
		handler.TypedEnqueueRequestForOwner[*kueuev1beta2.Workload](mgr.GetScheme(), mgr.GetRESTMapper(),
			&ibjv1.IndexedBatchJob{}, handler.OnlyControllerOwner()))); err != nil {
		return nil, err
	}
	return c, nil
}

// waitForWorkloads waits for the cache's first list of Workloads. If it
// does not come within workloadSyncTimeout, the error says why when the API
// server says (the informer goes on retrying, and logging, on its own).
func waitForWorkloads(ctx context.Context, mgr ctrl.Manager) error {
	informer, err := mgr.GetCache().GetInformer(ctx, &kueuev1beta2.Workload{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watching Workloads: %w", err)
	}
	syncCtx, cancel := context.WithTimeout(ctx, workloadSyncTimeout)
	defer cancel()
	if toolscache.WaitForCacheSync(syncCtx.Done(), informer.HasSynced) {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err := mgr.GetAPIReader().List(ctx, &kueuev1beta2.WorkloadList{}, client.Limit(1)); err != nil {
		return fmt.Errorf("listing Workloads: %w", err)
	}
	return fmt.Errorf("the Workloads were not listed and watched within %s", workloadSyncTimeout)
}
