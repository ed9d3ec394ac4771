// Command kube-proxy is the upstream service proxy, built from the module
// proxy. The node cluster (make node-cluster) runs it in iptables mode, so
// that its pods reach Services by their cluster IPs as on any node.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-proxy/app"
)

func main() {
	os.Exit(cli.Run(app.NewProxyCommand()))
}
