// Command kubelet is the upstream kubelet, built from the module proxy. The
// node cluster (make node-cluster) runs it on containerd and runc, so that
// the node specs run real containers.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
