package kueue

import (
	"context"
	"errors"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	kueuev1beta2 "sigs.k8s.io/kueue/apis/kueue/v1beta2"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
)

// AddToScheme adds Kueue's API to scheme, which costs nothing while the
// integration does not run.
func AddToScheme(scheme *runtime.Scheme) error { return kueuev1beta2.AddToScheme(scheme) }

// Options configure the integration.
type Options struct {
	// Mode is the --kueue flag's: kueueapi.ModeAuto, ModeEnabled or
	// ModeDisabled.
	Mode string
	// PodName and PodNamespace name the operator's own Pod (the downward
	// API's POD_NAME and POD_NAMESPACE), which the integration's events are
	// about. Outside a Pod (both empty, or the Pod not found) they are
	// about the IndexedBatchJob CRD.
	PodName, PodNamespace string
	// Settings are Kueue's manageJobsWithoutQueueName and
	// managedJobsNamespaceSelector, which Kueue's reconciler and the
	// defaulting webhook apply (the zero Settings are Kueue's defaults).
	Settings Settings
	// NewController builds the controller that runs Kueue's reconciler
	// (NewController when nil). Tests put a failing one here.
	NewController func(context.Context, ctrl.Manager, Settings) (manager.Runnable, error)
}

// Integration is the integration as the rest of the operator sees it.
type Integration struct {
	mode     string
	settings Settings
	// served is closed once Kueue's Workload API is served.
	served chan struct{}
	active atomic.Bool
	state  atomic.Value // State
}

// Active reports whether jobs labelled with a queue name are Kueue's: with
// kueueapi.ModeEnabled always, with kueueapi.ModeAuto once Kueue's API was
// found. It does not wait for the leader's Kueue controller to run: a job
// queued while that controller cannot start waits suspended for it, rather
// than run past Kueue's quotas.
func (i *Integration) Active() bool {
	return i != nil && (i.mode == kueueapi.ModeEnabled || i.active.Load())
}

// State is where the integration stands in this process (StateDisabled
// for the nil Integration of kueueapi.ModeDisabled).
func (i *Integration) State() State {
	if i == nil {
		return StateDisabled
	}
	s, _ := i.state.Load().(State)
	return s
}

func (i *Integration) setState(s State) {
	i.state.Store(s)
	reportState(s)
}

// Setup starts the integration in o.Mode inside mgr, which may be running
// already; it never restarts it. Every replica waits for Kueue's Workload
// API (kueueapi.WaitServed), at start or later, since the defaulting
// webhook every replica serves asks Active. Once the API is served, the
// leader runs Kueue's generic job reconciler for IndexedBatchJobs in this
// process (run.go): if that fails, it logs the error, records an event and
// reports StateFailed, retries with a growing delay, and the rest of the
// operator runs on. Setup fails only on a bad mode or a manager that takes
// no runnable; it returns a nil Integration for kueueapi.ModeDisabled.
func Setup(mgr ctrl.Manager, o Options) (*Integration, error) {
	if err := kueueapi.CheckMode(o.Mode); err != nil {
		return nil, err
	}
	if o.Mode == kueueapi.ModeDisabled {
		reportState(StateDisabled)
		return nil, nil
	}
	d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	crds, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	i := &Integration{mode: o.Mode, settings: o.Settings.withDefaults(), served: make(chan struct{})}
	i.setState(StateWaiting)
	newController := o.NewController
	if newController == nil {
		newController = NewController
	}
	r := &runner{
		mgr: mgr, integration: i, newController: newController,
		events: &eventReporter{
			recorder: mgr.GetEventRecorder(ControllerName), reader: mgr.GetAPIReader(),
			podName: o.PodName, podNamespace: o.PodNamespace,
		},
	}
	return i, errors.Join(mgr.Add(waitForKueue{discovery: d, crds: crds, integration: i}), mgr.Add(r))
}

// waitForKueue waits for Kueue's API on every replica, leader or not.
type waitForKueue struct {
	discovery   discovery.DiscoveryInterface
	crds        metadata.Interface
	integration *Integration
}

var _ manager.LeaderElectionRunnable = waitForKueue{}

// NeedLeaderElection is false: see waitForKueue.
func (waitForKueue) NeedLeaderElection() bool { return false }

// Start checks for Kueue's API, waits for it if it is not served yet, then
// marks the integration served (and active). It never fails: an error
// checking the API is logged and the wait goes on.
func (w waitForKueue) Start(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx).WithName("kueue")
	served, err := kueueapi.Served(w.discovery)
	if err != nil {
		log.Error(err, "Checking for Kueue's API at start; waiting for it")
	}
	if !served {
		log.Info("Waiting for Kueue's API", "api", kueueapi.WorkloadGVK.GroupVersion(), "kind", kueueapi.WorkloadGVK.Kind)
		if !kueueapi.WaitServed(ctx, w.discovery, w.crds, log) {
			return nil
		}
	}
	i := w.integration
	i.active.Store(true)
	// Before served is closed, after which the leader's runner reports
	// where it stands.
	i.setState(StateStandby)
	close(i.served)
	log.Info("Kueue's API is served: IndexedBatchJobs labelled kueue.x-k8s.io/queue-name are queued by Kueue")
	return nil
}

// ControllerName names the controller that runs Kueue's reconciler, in
// logs, metrics and the events it records.
const ControllerName = "indexedbatchjob-kueue"

// Defaulter returns what Kueue's webhook does to a new job of an
// integration, for the operator's defaulting webhook to apply: while the
// integration is Active, a job Kueue manages under the integration's
// Settings (labelled kueue.x-k8s.io/queue-name, or any job with
// manageJobsWithoutQueueName, in a namespace the selector matches, and not
// part of a job Kueue already manages) is created suspended, so that it
// runs only once Kueue admits its Workload; a job without a queue name
// gets the queue name "default" when its namespace has that LocalQueue. c
// reads the namespace and the LocalQueue.
func (i *Integration) Defaulter(c client.Client) func(context.Context, *ibjv1.IndexedBatchJob) error {
	return func(ctx context.Context, job *ibjv1.IndexedBatchJob) error {
		if !i.Active() {
			return nil
		}
		return i.settings.defaultJob(ctx, c, (*Job)(job))
	}
}
