// Command multikueue-cluster runs the clusters of `make demo-multikueue`
// (a manager cluster and its workers, with Kueue's MultiKueue wired between
// them and the operator on each; see test/harness/multikueue) until it gets
// SIGINT or SIGTERM, then stops them. Once they are up, with the queues of
// --namespace on each, it writes each cluster's admin kubeconfig to
// <dir>/<cluster>/kubeconfig and then creates <dir>/ready. Needs root
// (Kueue's manager runs chrooted).
//
// usage: multikueue-cluster --dir DIR --kueue KUEUE --operator MANAGER [--workers N] [--namespace NS] [--root REPO]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/multikueue"
)

func main() {
	var (
		dir, root, kueue, operator, namespace string
		workers                               int
	)
	flag.StringVar(&dir, "dir", "", "Directory for the clusters' kubeconfigs, state and logs (required).")
	flag.StringVar(&root, "root", ".", "Repository root: where bin/, config/ and hack/ are.")
	flag.StringVar(&kueue, "kueue", "", "Kueue's manager binary (make kueue-manager builds it; required).")
	flag.StringVar(&operator, "operator", "", "The operator binary, bin/manager (required).")
	flag.StringVar(&namespace, "namespace", "team-a", "Namespace whose LocalQueue (of the same name) dispatches through MultiKueue.")
	flag.IntVar(&workers, "workers", 2, "Number of worker clusters.")
	flag.Parse()
	if dir == "" || kueue == "" || operator == "" {
		fmt.Fprintln(os.Stderr, "multikueue-cluster: --dir, --kueue and --operator are required")
		os.Exit(2)
	}
	root, err := filepath.Abs(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "multikueue-cluster:", err)
		os.Exit(1)
	}
	ctx, stop := harness.StopContext()
	defer stop()
	f, err := multikueue.Start(ctx, multikueue.Options{
		Root: root, Dir: dir, KueueBinary: kueue, OperatorBinary: operator, Workers: workers, Progress: os.Stdout,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "multikueue-cluster:", err)
		os.Exit(1)
	}
	code := 0
	if err := f.Queues(ctx, namespace, "8", false); err != nil {
		fmt.Fprintln(os.Stderr, "multikueue-cluster:", err)
		code = 1
	} else if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(f.Manager.Cluster.Kubeconfig+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "multikueue-cluster:", err)
		code = 1
	} else {
		<-ctx.Done()
	}
	if err := f.Stop(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "multikueue-cluster: stopping:", err)
		code = 1
	}
	os.Exit(code)
}
