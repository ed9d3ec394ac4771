// Command kwok-cluster runs the throwaway cluster of `make demo` (etcd,
// kube-apiserver, the IndexedBatchJob CRD, kwok's fake nodes and a binder;
// see test/harness/kwokcluster) until it gets SIGINT or SIGTERM, then stops it.
// Once the cluster is up it writes the admin kubeconfig to <dir>/kubeconfig,
// the flags an operator needs to serve the admission webhook the cluster
// calls to <dir>/webhook-args (one a line), and then creates <dir>/ready.
//
// usage: kwok-cluster --dir DIR [--nodes N] [--root REPO] [--kubelets kwok|podsim] [--workload-api]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

func main() {
	var (
		dir, root, kubelets string
		nodes               int
		workloadAPI         bool
	)
	flag.StringVar(&dir, "dir", "", "Directory for the kubeconfig, state and logs (required).")
	flag.StringVar(&root, "root", ".", "Repository root: where bin/, config/ and hack/ are.")
	flag.IntVar(&nodes, "nodes", 2, "Number of fake nodes.")
	flag.StringVar(&kubelets, "kubelets", "kwok", "What runs the fake nodes' pods: kwok (bin/kwok-<version>/kwok, its stages in hack/kwok/stages) "+
		"or podsim (the test harness's pod simulator in this process, reading the same pod annotations; no kwok binary needed).")
	flag.BoolVar(&workloadAPI, "workload-api", false, "Serve Kubernetes 1.37's Workload API (feature gate GenericWorkload) and run the real kube-scheduler "+
		"with it in place of the binder, so that a gang job's pods are placed all or none (needs --kubelets kwok and bin/k8s/<version>/kube-scheduler).")
	flag.Parse()
	kinds := map[string]kwokcluster.Kubelets{"kwok": kwokcluster.KwokKubelets, "podsim": kwokcluster.SimulatedKubelets}
	kind, ok := kinds[kubelets]
	if !ok {
		fmt.Fprintf(os.Stderr, "kwok-cluster: --kubelets must be kwok or podsim, not %q\n", kubelets)
		os.Exit(2)
	}
	if dir == "" {
		fmt.Fprintln(os.Stderr, "kwok-cluster: --dir is required")
		os.Exit(2)
	}
	if workloadAPI && kind != kwokcluster.KwokKubelets {
		fmt.Fprintln(os.Stderr, "kwok-cluster: --workload-api needs --kubelets kwok")
		os.Exit(2)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kwok-cluster:", err)
		os.Exit(1)
	}

	ctx, stop := harness.StopContext()
	defer stop()
	cluster, err := kwokcluster.Start(ctx, kwokcluster.Options{
		Root: root, Dir: dir, Nodes: nodes, Kubelets: kind, Progress: os.Stdout,
		KubeScheduler: workloadAPI, WorkloadAPI: workloadAPI,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kwok-cluster:", err)
		os.Exit(1)
	}
	// The flags the operator needs to serve the admission webhook the
	// cluster calls, one a line.
	webhookArgs := strings.Join(cluster.WebhookArgs(0, filepath.Join(dir, "webhook-certs")), "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "webhook-args"), []byte(webhookArgs), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "kwok-cluster:", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(cluster.Kubeconfig+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "kwok-cluster:", err)
	}
	<-ctx.Done()
	if err := cluster.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "kwok-cluster: stopping:", err)
		os.Exit(1)
	}
}
