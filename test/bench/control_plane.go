package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// The users the controllers under test run as; the audit log counts each
// one's requests. By default they are who they are on a cluster, and API
// Priority and Fairness classifies them with the API server's default
// FlowSchemas: kube-controller-manager's own user (FlowSchema
// kube-controller-manager, priority level workload-high) and the
// operator's ServiceAccount (service-accounts, workload-low), each with
// the permissions its install gives it. With -exempt both are
// system:masters users, which APF exempts (the benchmarks before
// 2026-12-07).
var operatorUser, kcmUser string

// Who the controllers are under APF, and under -exempt.
const (
	operatorNamespace = "indexed-batch-job-system"
	operatorSA        = "system:serviceaccount:" + operatorNamespace + ":indexed-batch-job-controller-manager"
	kcmSelf           = "system:kube-controller-manager"
	exemptOperator    = "ibj-operator"
	exemptKCM         = "kcm-job-controller"
	authenticated     = "system:authenticated"
)

// controllerUsers sets operatorUser and kcmUser for the mode, and returns
// the users to make.
func controllerUsers() []controlplane.User {
	if *exempt {
		operatorUser, kcmUser = exemptOperator, exemptKCM
		masters := []string{"system:masters"}
		users := []controlplane.User{{Name: operatorUser, Groups: masters}, {Name: kcmUser, Groups: masters}}
		if *canaryReplicas > 0 { // the canary's controllers run as on a cluster
			users = append(users, controlplane.User{Name: kcmSelf, Groups: []string{authenticated}})
		}
		return users
	}
	operatorUser, kcmUser = operatorSA, kcmSelf
	return []controlplane.User{
		{Name: operatorUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + operatorNamespace, authenticated}},
		{Name: kcmUser, Groups: []string{authenticated}},
	}
}

// grantControllers gives each controller the permissions it has on a
// cluster (not needed under -exempt): the operator its install's
// ClusterRole (config/rbac/role.yaml), kube-controller-manager's Job
// controller its bootstrap ClusterRole system:controller:job-controller,
// which a cluster gives its job-controller ServiceAccount.
func (b *bench) grantControllers(ctx context.Context) error {
	if *exempt {
		return nil
	}
	data, err := os.ReadFile(filepath.Join("config", "rbac", "role.yaml"))
	if err != nil {
		return err
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		return err
	}
	role.Name = "bench-indexed-batch-job-manager"
	if err := b.cl.Create(ctx, role); err != nil {
		return err
	}
	for name, grant := range map[string]struct{ role, user string }{
		"bench-indexed-batch-job-manager": {role.Name, operatorUser},
		"bench-kcm-job-controller":        {"system:controller:job-controller", kcmUser},
	} {
		if err := b.cl.Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: grant.role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: grant.user}},
		}); err != nil {
			return err
		}
	}
	return nil
}

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
	users := controllerUsers()
	policy := filepath.Join(work, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy(operatorUser, kcmUser)), 0o644); err != nil {
		return nil, err
	}
	b.cp, err = controlplane.Start(ctx, controlplane.Options{
		BinDir: absAssets, Dir: work, Name: "bench",
		APIServerFlags: []string{
			// No controller here creates a namespace's default service
			// account, which that admission plugin requires of a pod.
			"--disable-admission-plugins=ServiceAccount",
			"--audit-policy-file=" + policy, "--audit-log-path=" + b.auditLog, "--audit-log-maxsize=0",
		},
		CRDPaths: []string{"config/crd/bases"},
		Users:    users,
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
	if err := b.grantControllers(ctx); err != nil {
		b.stop()
		return nil, fmt.Errorf("granting the controllers their permissions: %w", err)
	}
	if *flowSchema {
		if err := b.installFlowSchema(ctx); err != nil {
			b.stop()
			return nil, fmt.Errorf("installing the operator's FlowSchema: %w", err)
		}
	}
	if *canaryReplicas > 0 {
		if err := b.startCanary(ctx); err != nil {
			b.stop()
			return nil, fmt.Errorf("starting the canary: %w", err)
		}
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
	if b.stopCanarySim != nil {
		b.stopCanarySim()
	}
	_ = b.cp.Stop()
	if *keep {
		log.Printf("controller logs and the audit log stay in %s", b.work)
		return
	}
	_ = os.RemoveAll(b.work)
}
