// Command kube-scheduler is the upstream scheduler, built from the module
// proxy. The node cluster (make node-cluster) runs it to bind pods to its
// real kubelet.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
