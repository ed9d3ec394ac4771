// Package kueueapi is what the operator knows of Kueue before its
// integration runs: the modes of its --kueue flag, the Workload API the
// integration waits for, whether the API server serves it, and how to wait
// until it does. The integration (internal/kueue) waits with it. It imports
// nothing of Kueue: knowing the API's name and waiting for it take
// client-go alone.
package kueueapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Modes of the integration, as the operator's --kueue flag takes them.
const (
	// ModeAuto runs the integration once Kueue's Workload API is served,
	// so that Kueue may be installed after the operator: it checks at
	// start and then whenever the Workload CRD changes (WaitServed), and
	// starts the integration inside the running operator once it is
	// served.
	ModeAuto = "auto"
	// ModeEnabled is ModeAuto, and also suspends jobs labelled with a queue
	// name before Kueue's API is there.
	ModeEnabled = "enabled"
	// ModeDisabled never runs it.
	ModeDisabled = "disabled"
)

// CheckMode returns a flag error unless mode is one of the modes.
func CheckMode(mode string) error {
	switch mode {
	case ModeAuto, ModeEnabled, ModeDisabled:
		return nil
	}
	return fmt.Errorf("--kueue must be %s, %s or %s, not %q", ModeAuto, ModeEnabled, ModeDisabled, mode)
}

// WorkloadGVK is the Kueue API the integration needs.
var WorkloadGVK = schema.GroupVersionKind{Group: "kueue.x-k8s.io", Version: "v1beta2", Kind: "Workload"}

// workloadCRD names the CustomResourceDefinition that brings WorkloadGVK.
var workloadCRD = "workloads." + WorkloadGVK.Group

// Served reports whether the API server serves WorkloadGVK. A group
// version the server does not know is not an error.
func Served(d discovery.DiscoveryInterface) (bool, error) {
	list, err := d.ServerResourcesForGroupVersion(WorkloadGVK.GroupVersion().String())
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering %s: %w", WorkloadGVK.GroupVersion(), err)
	}
	for _, r := range list.APIResources {
		if r.Kind == WorkloadGVK.Kind && !strings.Contains(r.Name, "/") { // not a subresource
			return true, nil
		}
	}
	return false, nil
}

// After a change of the Workload CRD, discovery is checked every
// recheckEvery until recheckFor has passed without another change: the API
// server serves a new CRD's versions a moment after the CRD is written
// (once it is Established, and its discovery document is rebuilt).
const (
	recheckEvery = time.Second
	recheckFor   = 30 * time.Second
)

// Without the permission to watch CRDs, WaitServed polls discovery with a
// delay that grows from the first to the longest, as Kueue's own
// integrations wait for their APIs.
const (
	firstWait   = time.Second
	longestWait = 2 * time.Minute
)

// The wait lists and watches the Workload CRD, by name and metadata only,
// to be told when Kueue is installed.
// +kubebuilder:rbac:groups=apiextensions.k8s.io,resources=customresourcedefinitions,verbs=get;list;watch

// WaitServed waits until Served reports true, and then returns true, or
// until ctx ends, and then returns false. Its caller has just checked
// Served.
//
// It watches the Workload CRD, by name and metadata only, and keeps neither
// its annotations nor its managed fields (a CRD carries its whole schema,
// and a client-side apply a second copy of it in an annotation); it checks
// Served on each change of the CRD, as recheckEvery and recheckFor say.
// While the CRD does not change it sends no request but the watch, which
// the informer renews when it expires or breaks. If CRDs may not be listed
// or watched (an install whose ClusterRole predates this wait, or RBAC of
// one's own), it logs so once and polls Served with a growing delay
// instead. Other errors are logged and retried.
func WaitServed(ctx context.Context, d discovery.DiscoveryInterface, crds metadata.Interface, log logr.Logger) bool {
	w := crdWait{discovery: d, crds: crds, log: log, recheckEvery: recheckEvery, recheckFor: recheckFor}
	return w.wait(ctx)
}

// crdWait is WaitServed, with the durations of its checks after a change.
type crdWait struct {
	discovery                discovery.DiscoveryInterface
	crds                     metadata.Interface
	log                      logr.Logger
	recheckEvery, recheckFor time.Duration
}

// crdGVR is the resource the wait watches.
var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func (w crdWait) wait(ctx context.Context) bool {
	changed := make(chan struct{}, 1)
	forbidden := make(chan error, 1)
	informer := w.informer(changed, forbidden)
	informerCtx, stopInformer := context.WithCancel(logr.NewContext(ctx, w.log))
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		informer.RunWithContext(informerCtx)
	}()
	defer func() {
		stopInformer()
		<-stopped
	}()

	for {
		select {
		case <-ctx.Done():
			return false
		case err := <-forbidden:
			w.log.Error(err, "Cannot watch CustomResourceDefinitions (forbidden): polling discovery for Kueue's API "+
				"with a growing delay instead; grant get, list and watch on customresourcedefinitions.apiextensions.k8s.io, "+
				"as the installed ClusterRole does, to be told when Kueue is installed",
				"crd", workloadCRD)
			stopInformer()
			<-stopped
			return w.poll(ctx)
		case <-changed:
			if w.checkWhileChanging(ctx, changed) {
				return true
			}
		}
	}
}

// informer watches the metadata of the Workload CRD, sends on changed
// (without blocking: one pending change is enough) when it is added or
// updated, and sends the first refusal to list or watch it on forbidden.
func (w crdWait) informer(changed chan<- struct{}, forbidden chan<- error) cache.SharedIndexInformer {
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", workloadCRD).String()
	}
	informer := metadatainformer.NewFilteredMetadataInformer(w.crds, crdGVR, metav1.NamespaceAll, 0, cache.Indexers{}, byName).Informer()
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	// Neither can fail before the informer runs.
	_ = informer.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.Annotations, m.ManagedFields = nil, nil
		}
		return obj, nil
	})
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		if apierrors.IsForbidden(err) {
			select {
			case forbidden <- err:
			default:
			}
			return
		}
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { signal() },
		UpdateFunc: func(old, cur any) {
			// A relist after an expired watch repeats what is known.
			o, _ := old.(metav1.Object)
			c, _ := cur.(metav1.Object)
			if o == nil || c == nil || o.GetResourceVersion() != c.GetResourceVersion() {
				signal()
			}
		},
	})
	return informer
}

// checkWhileChanging checks Served now and then every recheckEvery, until
// it reports true (and returns true), ctx ends, or recheckFor passes with no
// further change on changed (and returns false).
func (w crdWait) checkWhileChanging(ctx context.Context, changed <-chan struct{}) bool {
	if w.served() {
		return true
	}
	tick := time.NewTicker(w.recheckEvery)
	defer tick.Stop()
	lastChange := time.Now()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-changed:
			lastChange = time.Now()
		case <-tick.C:
			if w.served() {
				return true
			}
			if time.Since(lastChange) >= w.recheckFor {
				w.log.Info("Kueue's Workload CRD changed, but its API is not served: waiting for its next change",
					"crd", workloadCRD, "api", WorkloadGVK.GroupVersion())
				return false
			}
		}
	}
}

// poll checks Served, first after the first delay, until it reports true
// (and returns true) or ctx ends (and returns false).
func (w crdWait) poll(ctx context.Context) bool {
	delays := workqueue.NewTypedItemExponentialFailureRateLimiter[string](firstWait, longestWait)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delays.When("")):
		}
		if w.served() {
			return true
		}
	}
}

// served is Served, with its error logged as false.
func (w crdWait) served() bool {
	served, err := Served(w.discovery)
	if err != nil {
		w.log.Error(err, "Checking for Kueue's API")
	}
	return served
}
