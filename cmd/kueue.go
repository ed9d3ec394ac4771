//go:build !nokueue

package main

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
)

// This is the Kueue build: it links Kueue's jobframework and runs the
// integration in its own manager (internal/kueue). The image's entrypoint is
// the lean build (kueue_lean.go), which runs this one in its place once the
// integration is wanted.

func addKueueToScheme(s *runtime.Scheme) error { return ibjkueue.AddToScheme(s) }

// handOverAtStart has nothing to hand over to in this build.
func handOverAtStart(*rest.Config, string) error { return nil }

// setupKueue starts the integration in mode and returns the defaulting
// webhook's queue step (nil when mode is disabled). This build never hands
// over, so it returns no hand-over.
func setupKueue(mgr ctrl.Manager, mode string, _ context.CancelFunc) (queueDefaulting, func() error, error) {
	kq, err := ibjkueue.Setup(mgr, mode)
	if err != nil || kq == nil {
		return nil, nil, err
	}
	return kq.Defaulter, nil, nil
}
