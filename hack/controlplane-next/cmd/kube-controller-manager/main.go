// Command kube-controller-manager is the upstream controller manager of the
// next minor, built from the module proxy. The e2e scheduling specs run its
// Job and ResourceClaim controllers beside the operator.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
