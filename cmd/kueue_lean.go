//go:build nokueue

package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/indexed-batch-job/indexed-batch-job/internal/kueueapi"
)

// This is the lean build (-tags nokueue), the image's entrypoint: it does
// not link Kueue's jobframework, which doubles the binary and what it
// holds in memory at rest. While the Kueue integration is not wanted it is
// the whole operator. Once it is (--kueue=enabled, or --kueue=auto with
// Kueue's Workload API served, at start or later) it execs the Kueue build,
// installed beside it as <its own path>-kueue, with the same arguments and
// environment: the process keeps its PID and its container.

// kueueBuildSuffix names the Kueue build after the lean one's path.
const kueueBuildSuffix = "-kueue"

func addKueueToScheme(*runtime.Scheme) error { return nil }

// handOverAtStart execs the Kueue build before anything starts when the
// integration is wanted now. A failed check of Kueue's API is logged and
// left to the wait that setupKueue starts.
func handOverAtStart(cfg *rest.Config, mode string) error {
	if err := kueueapi.CheckMode(mode); err != nil {
		return err
	}
	switch mode {
	case kueueapi.ModeDisabled:
		return nil
	case kueueapi.ModeEnabled:
		return execKueueBuild("--kueue=" + mode)
	}
	d, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	served, err := kueueapi.Served(d)
	if err != nil {
		setupLog.Error(err, "Checking for Kueue's API at start; waiting for it")
		return nil
	}
	if served {
		return execKueueBuild("Kueue's API is served")
	}
	return nil
}

// setupKueue waits for Kueue's API with --kueue=auto (kueueapi.WaitServed:
// a watch of the Workload CRD's metadata). Once it is served, the wait
// stops the manager (its lease released, its servers closed) and the
// returned hand-over, which main calls once the manager has stopped, execs
// the Kueue build. No webhook queue step runs in this build: jobs are
// suspended for Kueue only by the Kueue build.
func setupKueue(mgr ctrl.Manager, mode string, stop context.CancelFunc) (queueDefaulting, func() error, error) {
	if mode != kueueapi.ModeAuto {
		return nil, nil, nil
	}
	d, err := discovery.NewDiscoveryClientForConfig(mgr.GetConfig())
	if err != nil {
		return nil, nil, err
	}
	crds, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, nil, err
	}
	w := &kueueWatch{discovery: d, crds: crds, stop: stop}
	return nil, w.handOver, mgr.Add(w)
}

// kueueWatch waits for Kueue's API on every replica, leader or not, as
// the Kueue build does: a standby's webhook must queue jobs too.
type kueueWatch struct {
	discovery discovery.DiscoveryInterface
	crds      metadata.Interface
	stop      context.CancelFunc
	found     atomic.Bool
}

// NeedLeaderElection is false: see kueueWatch.
func (*kueueWatch) NeedLeaderElection() bool { return false }

// Start waits until Kueue's API is served, then stops the manager.
func (w *kueueWatch) Start(ctx context.Context) error {
	if !kueueapi.WaitServed(ctx, w.discovery, w.crds, ctrl.LoggerFrom(ctx).WithName("kueue")) {
		return nil
	}
	setupLog.Info("Kueue's API is served: stopping, to run the Kueue build in this process")
	w.found.Store(true)
	w.stop()
	return nil
}

// handOver execs the Kueue build if the watch found Kueue's API.
func (w *kueueWatch) handOver() error {
	if !w.found.Load() {
		return nil
	}
	return execKueueBuild("Kueue's API is served")
}

// execKueueBuild replaces this process with the Kueue build, giving it
// this process's arguments and environment; it returns only on failure.
func execKueueBuild(why string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary, to run its Kueue build: %w", err)
	}
	path := self + kueueBuildSuffix
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("the Kueue integration is wanted (%s), but this lean build does not link it "+
			"and its Kueue build is missing (%w): install both of the image's binaries, or run with --kueue=disabled", why, err)
	}
	setupLog.Info("Running the Kueue build", "reason", why, "path", path)
	return syscall.Exec(path, append([]string{path}, os.Args[1:]...), os.Environ())
}
