// Command kubectl-ibj is the kubectl plugin `kubectl ibj`: the per-index
// view of an IndexedBatchJob, its state in words, the nodes where its pods
// failed, and reruns of chosen indexes. kubectl runs it as `kubectl ibj …`
// once it is on the PATH (`make install-plugin`, `go install
// ./cmd/kubectl-ibj`, or krew with hack/krew/ibj.yaml).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/utils/clock"

	"github.com/indexed-batch-job/indexed-batch-job/internal/kubectlibj"
)

func main() {
	flags := pflag.NewFlagSet("kubectl-ibj", pflag.ExitOnError)
	pflag.CommandLine = flags

	streams := genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}
	root := kubectlibj.NewCommand(streams, clock.RealClock{})
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
