package harness

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	ibjv1 "github.com/indexed-batch-job/indexed-batch-job/api/v1alpha1"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// EnvtestOptions says what an integration suite's control plane serves
// besides the API server's own types.
type EnvtestOptions struct {
	// Scheme is the client's; StartEnvtest adds client-go's types and the
	// IndexedBatchJob API to it.
	Scheme *runtime.Scheme
	// NoCRD starts the API server without the operator's CRD (for suites
	// whose installers bring it).
	NoCRD bool
	// MoreCRDDirs are installed with the operator's CRD.
	MoreCRDDirs []string
	// Webhooks installs the operator's webhook configurations
	// (config/webhook), and these others, pointed at envtest's local
	// serving address and certificate.
	Webhooks           bool
	MutatingWebhooks   []*admissionv1.MutatingWebhookConfiguration
	ValidatingWebhooks []*admissionv1.ValidatingWebhookConfiguration
	// Log receives controller-runtime's log (a suite's GinkgoWriter).
	Log io.Writer
	// WorkloadAPI starts kube-apiserver serving the Workload API
	// (controlplane.WorkloadAPIServerFlags; Kubernetes 1.37 or later).
	WorkloadAPI bool
	// FeatureGates is kube-apiserver's --feature-gates, such as
	// "ContainerRestartRules=false,RestartAllContainersOnContainerExits=false"
	// (a gate that another depends on must go with it); empty leaves the
	// defaults.
	FeatureGates string
}

// Envtest is an integration suite's control plane, started by
// StartEnvtest: envtest's etcd and kube-apiserver, and clients of it (a
// typed clientset for podsim and event recorders).
type Envtest struct {
	Env       *envtest.Environment
	Config    *rest.Config
	Client    client.Client
	Clientset kubernetes.Interface
}

// StartEnvtest starts the control plane of KUBEBUILDER_ASSETS (the pinned
// binaries `make test` builds), as o describes it. It never skips: without
// KUBEBUILDER_ASSETS it fails, since a suite that silently does not run is
// worse than a red one.
func StartEnvtest(o EnvtestOptions) (*Envtest, error) {
	logf.SetLogger(zap.New(zap.WriteTo(o.Log), zap.UseDevMode(true)))
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		return nil, errors.New("KUBEBUILDER_ASSETS is not set: run `make test`, which builds the pinned control plane into bin/")
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := clientgoscheme.AddToScheme(o.Scheme); err != nil {
		return nil, err
	}
	if err := ibjv1.AddToScheme(o.Scheme); err != nil {
		return nil, err
	}
	env := &envtest.Environment{ErrorIfCRDPathMissing: true}
	if !o.NoCRD {
		env.CRDDirectoryPaths = append([]string{filepath.Join(root, "config", "crd", "bases")}, o.MoreCRDDirs...)
	}
	if o.WorkloadAPI {
		args := env.ControlPlane.GetAPIServer().Configure()
		for name, value := range controlplane.WorkloadAPIServerFlags {
			args.Set(name, value)
		}
	}
	if o.FeatureGates != "" {
		env.ControlPlane.GetAPIServer().Configure().Set("feature-gates", o.FeatureGates)
	}
	if o.Webhooks {
		env.WebhookInstallOptions = envtest.WebhookInstallOptions{
			Paths:              []string{filepath.Join(root, "config", "webhook")},
			MutatingWebhooks:   o.MutatingWebhooks,
			ValidatingWebhooks: o.ValidatingWebhooks,
		}
	}
	cfg, err := env.Start()
	if err != nil {
		// Start leaves etcd and kube-apiserver running when what fails is
		// the CRDs' or the webhooks' install.
		return nil, errors.Join(fmt.Errorf("starting the control plane (a CRD whose CEL rules do not compile or cost too much fails here): %w", err), env.Stop())
	}
	c, err := client.New(cfg, client.Options{Scheme: o.Scheme})
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, errors.Join(err, env.Stop())
	}
	return &Envtest{Env: env, Config: cfg, Client: c, Clientset: cs}, nil
}

// RunWithAPIServer runs a package's tests, m, beside a kube-apiserver of
// their own, for packages whose unit tests must run anywhere and whose
// other tests need an API server (and skip when they have none, unlike an
// integration suite's StartEnvtest). Without KUBEBUILDER_ASSETS it runs m
// alone. Otherwise it starts env, gives its config to setup (the package's
// clients, objects and RBAC), runs m and stops env. It returns the code for
// os.Exit: m's, or 1 with the reason on stderr if env or setup fails.
func RunWithAPIServer(m *testing.M, env *envtest.Environment, setup func(*rest.Config) error) int {
	if !haveAPIServer() {
		return m.Run()
	}
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting envtest:", errors.Join(err, env.Stop()))
		return 1
	}
	defer func() { _ = env.Stop() }()
	if err := setup(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the tests:", err)
		return 1
	}
	return m.Run()
}

// SkipWithoutAPIServer skips t, a test that needs a kube-apiserver, when
// KUBEBUILDER_ASSETS names none (in a package run by RunWithAPIServer, or
// one that starts its own envtest).
func SkipWithoutAPIServer(t testing.TB) {
	t.Helper()
	if !haveAPIServer() {
		t.Skip("needs a kube-apiserver: KUBEBUILDER_ASSETS is not set (make test builds the control plane and sets it)")
	}
}

// haveAPIServer tells whether KUBEBUILDER_ASSETS names a control plane to
// start.
func haveAPIServer() bool { return os.Getenv("KUBEBUILDER_ASSETS") != "" }

// WebhookServer is a webhook server on the address and certificate the
// installed webhook configurations point at, for a suite's manager.
func (e *Envtest) WebhookServer() ctrlwebhook.Server {
	o := e.Env.WebhookInstallOptions
	return ctrlwebhook.NewServer(ctrlwebhook.Options{Host: o.LocalServingHost, Port: o.LocalServingPort, CertDir: o.LocalServingCertDir})
}

// WebhookServing returns nil once the webhook server answers a TLS
// handshake, an error until then (for Eventually).
func (e *Envtest) WebhookServing() error {
	o := e.Env.WebhookInstallOptions
	addr := net.JoinHostPort(o.LocalServingHost, fmt.Sprint(o.LocalServingPort))
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		return err
	}
	return conn.Close()
}

// RepoRoot is the repository's root: the first directory up from the
// working directory (a test's package directory) that holds go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// StartAPIServer starts env for the test and stops it after, or skips the
// test when there is no kube-apiserver to start.
func StartAPIServer(t *testing.T, env *envtest.Environment) *rest.Config {
	t.Helper()
	SkipWithoutAPIServer(t)
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting envtest: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}
