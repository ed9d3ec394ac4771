package main

import (
	"context"
	"log"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// The users the controllers under test run as, both in system:masters:
// the audit log counts each one's requests.
const (
	operatorUser = "ibj-operator"
	kcmUser      = "kcm-job-controller"
)

// newBench starts the control plane (the harness's, on loopback, with the
// IndexedBatchJob CRD and an audit log of the two controllers' users),
// writes their kubeconfigs and starts the pod simulator.
func newBench(ctx context.Context) (*bench, error) {
	absAssets, _ := filepath.Abs(*assets)
	mgrBin, _ := filepath.Abs(*manager)
	work, err := os.MkdirTemp("", "ibj-bench-")
	if err != nil {
		return nil, err
	}
	b := &bench{work: work, manager: mgrBin, auditLog: filepath.Join(work, "audit.log"), kubeconfigs: map[string]string{}}
	policy := filepath.Join(work, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	masters := []string{"system:masters"}
	b.cp, err = controlplane.Start(ctx, controlplane.Options{
		BinDir: absAssets, Dir: work, Name: "bench",
		APIServerFlags: []string{
			// No controller here creates a namespace's default service
			// account, which that admission plugin requires of a pod.
			"--disable-admission-plugins=ServiceAccount",
			"--audit-policy-file=" + policy, "--audit-log-path=" + b.auditLog, "--audit-log-maxsize=0",
		},
		CRDPaths: []string{"config/crd/bases"},
		Users:    []controlplane.User{{Name: operatorUser, Groups: masters}, {Name: kcmUser, Groups: masters}},
	})
	if err != nil {
		return nil, err
	}
	for _, who := range []string{operatorUser, kcmUser} {
		b.kubeconfigs[who] = filepath.Join(work, who+".kubeconfig")
		if err := b.cp.WriteKubeconfig(b.kubeconfigs[who], who); err != nil {
			b.stop()
			return nil, err
		}
	}
	if err := b.startClients(ctx); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// startClients makes the benchmark's clients, as the admin with no
// client-side limit (as fast as the API server allows), and starts the
// pod simulator with them.
func (b *bench) startClients(ctx context.Context) error {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := ibjv1.AddToScheme(scheme); err != nil {
		return err
	}
	cfg := rest.CopyConfig(b.cp.Config)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = simulatorAgent
	var err error
	if b.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if b.cl, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	if b.wcl, err = client.NewWithWatch(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	simCtx, stop := context.WithCancel(ctx)
	b.stopSim = stop
	return newSimulator(b.cs).Run(simCtx)
}

// stop stops the simulator and the control plane, and removes the work
// directory unless -keep.
func (b *bench) stop() {
	if b.stopSim != nil {
		b.stopSim()
	}
	_ = b.cp.Stop()
	if *keep {
		log.Printf("controller logs and the audit log stay in %s", b.work)
		return
	}
	_ = os.RemoveAll(b.work)
}
