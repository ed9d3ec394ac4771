// Package kueuecluster runs Kueue's released manager on a kwokcluster as a
// deployment of it would: Kueue's CRDs, its own RBAC (its ServiceAccount
// and roles, as its kustomization names them), its webhook configurations
// and its manager binary as that ServiceAccount, chrooted into a root of its
// own as the image's nonroot user. The end-to-end and MultiKueue suites and
// the MultiKueue demo use it.
package kueuecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kueueinprocess"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// Names Kueue's kustomization gives its manager.
const (
	// Namespace is Kueue's namespace.
	Namespace = "kueue-system"
	// NamePrefix prefixes every object Kueue's kustomization creates.
	NamePrefix = "kueue-"
	// ServiceAccount is the manager's ServiceAccount.
	ServiceAccount = NamePrefix + "controller-manager"
	// nonroot is the user and group Kueue's image runs as.
	nonroot = 65532
)

// Options say which manager to run and how.
type Options struct {
	// Binary is Kueue's manager, built static (`make kueue-manager`).
	// Required.
	Binary string
	// Name names the manager's log and root directory in the cluster's
	// directory; default "kueue".
	Name string
	// Config is YAML added to the manager's Configuration (top-level
	// fields such as waitForPodsReady or multiKueue).
	Config string
	// FeatureGates are added to --feature-gates (VisibilityOnDemand is
	// always off: it would serve an aggregated API, not needed here).
	FeatureGates []string
}

// Manager is Kueue's manager running against a cluster.
type Manager struct {
	// Proc is the manager's process.
	Proc *controlplane.Process
	// Kubeconfig is the manager's kubeconfig: the cluster's admin token,
	// impersonating Kueue's ServiceAccount, so that the API server
	// authorizes each of its requests with Kueue's RBAC alone.
	Kubeconfig string
	// HealthPort serves /readyz.
	HealthPort int
	// Webhooks are the webhook configurations Install created.
	Webhooks []client.Object

	admin client.Client
}

// Install installs Kueue on c (its CRDs, its RBAC, its webhook
// configurations calling the manager on this host), starts its manager and
// returns once the manager is ready. It needs root (to chroot and change
// user). CRDs and RBAC already there are left as they are.
func Install(ctx context.Context, c *kwokcluster.Cluster, o Options) (*Manager, error) {
	if o.Name == "" {
		o.Name = "kueue"
	}
	if _, err := os.Stat(o.Binary); err != nil {
		return nil, fmt.Errorf("kueuecluster: the manager binary: %w (`make kueue-manager` builds it)", err)
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("running Kueue's manager chrooted takes root")
	}
	module, err := kueueinprocess.ModuleDir()
	if err != nil {
		return nil, err
	}
	admin, err := installAPI(ctx, c.ControlPlane, module)
	if err != nil {
		return nil, err
	}
	root := filepath.Join(c.Dir, fmt.Sprintf("%s-root-%d", o.Name, time.Now().UnixNano()))
	m := &Manager{Kubeconfig: filepath.Join(root, "etc", "kueue", "kubeconfig"), admin: admin}
	if m.HealthPort, err = c.FreePort(); err != nil {
		return nil, err
	}
	webhook, err := c.FreePort()
	if err != nil {
		return nil, err
	}
	if err := m.prepareRoot(c.ControlPlane, root, managerConfig(m.HealthPort, webhook, o.Config), o.Binary); err != nil {
		return nil, err
	}
	gates := strings.Join(append([]string{"VisibilityOnDemand=false"}, o.FeatureGates...), ",")
	m.Proc, err = controlplane.StartProcess(o.Name, filepath.Join(c.Dir, o.Name+".log"),
		[]string{"KUBECONFIG=/etc/kueue/kubeconfig"},
		"chroot", "--userspec="+strconv.Itoa(nonroot)+":"+strconv.Itoa(nonroot), "--groups=", root,
		"/kueue", "--config=/etc/kueue/config.yaml", "--feature-gates="+gates)
	if err != nil {
		return nil, err
	}
	if err := m.waitReady(ctx); err != nil {
		_ = m.Proc.Stop(10 * time.Second)
		return nil, err
	}
	if err := m.installWebhooks(ctx, module, "https://127.0.0.1:"+strconv.Itoa(webhook), c.PKI.CA.CertPEM); err != nil {
		_ = m.Stop(ctx)
		return nil, err
	}
	return m, nil
}

// installAPI installs Kueue's CRDs and its manager's RBAC (from Kueue's
// module at module) on cp, and returns the admin's client that did.
func installAPI(ctx context.Context, cp *controlplane.ControlPlane, module string) (client.Client, error) {
	s := runtime.NewScheme()
	if err := errors.Join(corev1.AddToScheme(s), rbacv1.AddToScheme(s), admissionv1.AddToScheme(s)); err != nil {
		return nil, err
	}
	admin, err := client.New(cp.Config, client.Options{Scheme: s})
	if err != nil {
		return nil, err
	}
	if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{
		Paths: []string{kueueinprocess.CRDDir(module)}, ErrorIfPathMissing: true,
	}); err != nil {
		return nil, fmt.Errorf("installing Kueue's CRDs: %w", err)
	}
	return admin, installRBAC(ctx, admin, filepath.Join(module, "config", "components", "rbac"))
}

// prepareRoot makes the manager's root: Kueue's manager reads its metrics
// certificate from a fixed path, /etc/kueue/metrics/certs, whenever its
// internal certificate management is off, and exits without it. Rather
// than write into the host's /etc, it runs as its image would: chrooted
// into a root of its own, holding the (static) binary, that directory, its
// configuration, kubeconfig and a serving certificate from the cluster's
// CA, all owned by the image's nonroot user.
func (m *Manager) prepareRoot(cp *controlplane.ControlPlane, root, config, binary string) error {
	for _, d := range []string{"etc/kueue/metrics/certs", "etc/kueue/webhook/certs", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	if err := copyFile(binary, filepath.Join(root, "kueue"), 0o755); err != nil {
		return err
	}
	cert, key, err := cp.PKI.CA.ServingCert([]net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"})
	if err != nil {
		return err
	}
	files := map[string][]byte{"etc/kueue/config.yaml": []byte(config)}
	for _, d := range []string{"etc/kueue/metrics/certs", "etc/kueue/webhook/certs"} {
		files[d+"/tls.crt"], files[d+"/tls.key"] = cert, key
	}
	for path, data := range files {
		if err := os.WriteFile(filepath.Join(root, path), data, 0o600); err != nil {
			return err
		}
	}
	if err := writeKubeconfig(cp, m.Kubeconfig); err != nil {
		return err
	}
	return filepath.Walk(root, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, nonroot, nonroot)
	})
}

// managerConfig is the manager's Configuration: health on healthPort, its
// webhook on webhookPort, both on loopback, no leader election, no
// certificate management, IndexedBatchJob as an external framework, and
// extra (Options.Config).
func managerConfig(healthPort, webhookPort int, extra string) string {
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: %s
health:
  healthProbeBindAddress: 127.0.0.1:%d
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: /etc/kueue/webhook/certs
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
integrations:
  # An empty list means Kueue's default, batch/job, which needs no CRD.
  frameworks: ["batch/job"]
  externalFrameworks: ["IndexedBatchJob.v1alpha1.batch.indexedjob.dev"]
%s`, Namespace, healthPort, webhookPort, extra)
}

// waitReady waits up to a minute for the manager's /readyz.
func (m *Manager) waitReady(ctx context.Context) error {
	if err := m.Proc.WaitHealthy(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", m.HealthPort), time.Minute); err != nil {
		return fmt.Errorf("kueuecluster: %w:\n%s", err, m.Tail(40))
	}
	return nil
}

// Log is the manager's log so far.
func (m *Manager) Log() string {
	data, err := os.ReadFile(m.Proc.LogPath)
	if err != nil {
		return err.Error()
	}
	return string(data)
}

// Tail is the last n lines of the manager's log.
func (m *Manager) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(m.Log(), "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// Stop stops the manager (SIGTERM, then SIGKILL after 30 s) and removes
// its webhook configurations; its CRDs and RBAC stay.
func (m *Manager) Stop(ctx context.Context) error {
	errs := make([]error, 0, 1+len(m.Webhooks))
	errs = append(errs, m.Proc.Stop(30*time.Second))
	for _, w := range m.Webhooks {
		errs = append(errs, client.IgnoreNotFound(m.admin.Delete(ctx, w)))
	}
	return errors.Join(errs...)
}

// rbacFiles are the manager's RBAC among the RBAC manifests of Kueue's
// module, as its kustomization lists them: its ServiceAccount, the
// manager's ClusterRole, the Roles for leader election, its certificate
// Secret and MultiKueue's ClusterProfiles, the metrics endpoint's
// authorization, and their bindings. (The other roles there are for
// Kueue's users.)
var rbacFiles = []string{
	"service_account.yaml",
	"role.yaml", "role_binding.yaml",
	"leader_election_role.yaml", "leader_election_role_binding.yaml",
	"manager_secrets_role.yaml", "manager_secrets_role_binding.yaml",
	"manager_clusterprofiles_role.yaml", "manager_clusterprofiles_role_binding.yaml",
	"metrics_auth_role.yaml", "metrics_auth_role_binding.yaml",
}

// installRBAC creates what Kueue's kustomization makes of rbacFiles in dir:
// every name prefixed, namespaced objects (and the bindings'
// ServiceAccount) in Kueue's namespace.
func installRBAC(ctx context.Context, admin client.Client, dir string) error {
	if err := client.IgnoreAlreadyExists(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}})); err != nil {
		return err
	}
	bind := func(ref *rbacv1.RoleRef, subjects []rbacv1.Subject) {
		ref.Name = NamePrefix + ref.Name
		for i := range subjects {
			subjects[i].Name = NamePrefix + subjects[i].Name
			subjects[i].Namespace = Namespace
		}
	}
	for _, file := range rbacFiles {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			return err
		}
		var kind metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &kind); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		var obj client.Object
		switch kind.Kind {
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "ClusterRole":
			obj = &rbacv1.ClusterRole{}
		case "Role":
			obj = &rbacv1.Role{}
		case "ClusterRoleBinding":
			obj = &rbacv1.ClusterRoleBinding{}
		case "RoleBinding":
			obj = &rbacv1.RoleBinding{}
		default:
			return fmt.Errorf("%s: unexpected kind %q", file, kind.Kind)
		}
		if err := yaml.Unmarshal(raw, obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		obj.SetName(NamePrefix + obj.GetName())
		if obj.GetNamespace() != "" {
			obj.SetNamespace(Namespace)
		}
		switch b := obj.(type) {
		case *rbacv1.ClusterRoleBinding:
			bind(&b.RoleRef, b.Subjects)
		case *rbacv1.RoleBinding:
			bind(&b.RoleRef, b.Subjects)
		}
		if err := client.IgnoreAlreadyExists(admin.Create(ctx, obj)); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
	}
	return nil
}

// installWebhooks creates Kueue's webhook configurations for its own API
// (kueueinprocess.CoreWebhooks), calling base instead of Kueue's webhook
// Service, with caPEM as their CA.
func (m *Manager) installWebhooks(ctx context.Context, module, base string, caPEM []byte) error {
	mutating, validating, err := kueueinprocess.CoreWebhooks(module)
	if err != nil {
		return err
	}
	clientConfig := func(cc *admissionv1.WebhookClientConfig) {
		cc.URL = ptr.To(base + ptr.Deref(cc.Service.Path, "/"))
		cc.Service = nil
		cc.CABundle = caPEM
	}
	var objs []client.Object
	for _, c := range mutating {
		for i := range c.Webhooks {
			clientConfig(&c.Webhooks[i].ClientConfig)
		}
		objs = append(objs, c)
	}
	for _, c := range validating {
		for i := range c.Webhooks {
			clientConfig(&c.Webhooks[i].ClientConfig)
		}
		objs = append(objs, c)
	}
	for _, o := range objs {
		o.SetName(NamePrefix + o.GetName())
		if err := m.admin.Create(ctx, o); err != nil {
			return fmt.Errorf("creating %s: %w", o.GetName(), err)
		}
		m.Webhooks = append(m.Webhooks, o)
	}
	return nil
}

// writeKubeconfig writes a kubeconfig that reaches c with the admin's
// token but impersonates Kueue's ServiceAccount (and the groups a
// ServiceAccount's token carries).
func writeKubeconfig(c *controlplane.ControlPlane, path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kwok"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.Config.CAData}
	cfg.AuthInfos["kueue"] = &clientcmdapi.AuthInfo{
		Token:       c.Config.BearerToken,
		Impersonate: "system:serviceaccount:" + Namespace + ":" + ServiceAccount,
		ImpersonateGroups: []string{
			"system:serviceaccounts", "system:serviceaccounts:" + Namespace, "system:authenticated",
		},
	}
	cfg.Contexts["kwok"] = &clientcmdapi.Context{Cluster: "kwok", AuthInfo: "kueue"}
	cfg.CurrentContext = "kwok"
	return clientcmd.WriteToFile(*cfg, path)
}

// copyFile copies src to dst with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
