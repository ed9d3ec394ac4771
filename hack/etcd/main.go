// Command etcd is the upstream etcd server, built from the module proxy so the
// test control plane needs no downloaded binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
