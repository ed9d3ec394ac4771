// Command etcd is the etcd server this Kubernetes version is tested with
// (the version its k8s.io/kubernetes module requires), built in the same
// go build as kube-apiserver so that the packages both use compile once.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
