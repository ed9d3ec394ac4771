package harness

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// StopContext is a context cancelled by SIGTERM, or by SIGINT unless this
// process ignores it, for the cluster commands that run until stopped. A
// shell starts a background job with SIGINT ignored, and so do the demo
// scripts, which on Ctrl-C stop the operator first and the cluster after it,
// with SIGTERM: listening for SIGINT would undo that.
func StopContext() (context.Context, context.CancelFunc) {
	signals := []os.Signal{syscall.SIGTERM}
	if !signal.Ignored(os.Interrupt) {
		signals = append(signals, os.Interrupt)
	}
	return signal.NotifyContext(context.Background(), signals...)
}
