// Package kueueapi is what the operator knows of Kueue without linking it:
// the modes of its --kueue flag, the Workload API the integration waits
// for, and whether the API server serves it. The operator's lean build
// (cmd/kueue_lean.go) uses it to decide when to hand over to the build that
// links Kueue (internal/kueue); that build uses the same modes.
package kueueapi

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/util/workqueue"
)

// Modes of the integration, as the operator's --kueue flag takes them.
const (
	// ModeAuto runs the integration once Kueue's Workload API is served,
	// checked at start and then polled with a growing delay, so that Kueue
	// may be installed after the operator.
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

// The delay between two checks of WaitServed grows from the first to the
// longest, as Kueue's own integrations wait for their APIs.
const (
	firstWait   = time.Second
	longestWait = 2 * time.Minute
)

// WaitServed checks Served, first after the first delay (its caller has
// just checked), until it reports true, and then returns true, or until
// ctx ends, and then returns false. Errors are logged and checked again.
func WaitServed(ctx context.Context, d discovery.DiscoveryInterface, log logr.Logger) bool {
	delays := workqueue.NewTypedItemExponentialFailureRateLimiter[string](firstWait, longestWait)
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(delays.When("")):
		}
		served, err := Served(d)
		if err != nil {
			log.Error(err, "Checking for Kueue's API")
		}
		if served {
			return true
		}
	}
}
