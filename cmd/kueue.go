package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	ibjkueue "github.com/indexed-batch-job/indexed-batch-job/internal/kueue"
)

// setupKueue starts the Kueue integration in mode inside mgr
// (ibjkueue.Setup: once Kueue's API is served, at start or later, without
// restarting anything) and returns the defaulting webhook's queue step, nil
// when mode is disabled. It fails only on a bad mode: a failure of the
// integration itself is logged, recorded as an event about the operator's
// Pod (POD_NAME and POD_NAMESPACE, from the downward API) and reported by
// the indexedbatchjob_kueue_integration gauge, and the rest runs on.
func setupKueue(mgr ctrl.Manager, mode string) (queueDefaulting, error) {
	kq, err := ibjkueue.Setup(mgr, ibjkueue.Options{
		Mode:         mode,
		PodName:      os.Getenv("POD_NAME"),
		PodNamespace: os.Getenv("POD_NAMESPACE"),
	})
	if err != nil || kq == nil {
		return nil, err
	}
	return kq.Defaulter, nil
}
