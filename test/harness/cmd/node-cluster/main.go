// Command node-cluster runs the throwaway cluster of real nodes of make
// node-cluster (real containers on containerd and runc, a kubelet and a
// containerd per node; see test/harness/nodecluster) until it gets SIGINT or SIGTERM, then stops it
// and removes what it left on this host. Once the cluster is up it writes
// the admin kubeconfig to <dir>/kubeconfig and creates <dir>/ready. It needs
// root.
//
// usage: node-cluster --dir DIR [--nodes N] [--root REPO] [--images DIR]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/nodecluster"
)

func main() {
	var dir, root, images string
	var nodes int
	flag.StringVar(&dir, "dir", "", "Directory for the kubeconfig, state and logs (required).")
	flag.StringVar(&root, "root", ".", "Repository root: where bin/ and config/ are.")
	flag.IntVar(&nodes, "nodes", 2, fmt.Sprintf("How many nodes (1 to %d).", nodecluster.MaxNodes))
	flag.StringVar(&images, "images", "", "The OCI layouts of make node-images (default <root>/dist/node-images).")
	flag.Parse()
	if dir == "" {
		fmt.Fprintln(os.Stderr, "node-cluster: --dir is required")
		os.Exit(2)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-cluster:", err)
		os.Exit(1)
	}
	ctx, stop := harness.StopContext()
	defer stop()
	cluster, err := nodecluster.Start(ctx, nodecluster.Options{Root: root, Dir: dir, ImagesDir: images, Nodes: nodes, Progress: os.Stdout})
	if err != nil {
		fmt.Fprintln(os.Stderr, "node-cluster:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(cluster.Kubeconfig+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "node-cluster:", err)
	}
	<-ctx.Done()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "node-cluster: stopping:", err)
		os.Exit(1)
	}
}
