// Package controlplane is the test harness's one control-plane launcher:
// etcd and kube-apiserver from the pinned control plane (bin/k8s/<version>),
// with one PKI (pki.go), the CRDs asked for, and the kube-controller-manager
// and kube-scheduler asked for. Every cluster of the harness starts here:
// kwokcluster adds fake nodes (kwok or the pod simulator), nodecluster real
// ones (each in a network namespace of its own: RunIn), the benchmark its
// controllers under test. Run starts a node's processes (kwok, a kubelet)
// beside it, so that Check and Stop cover them too.
//
// Its flags are options: the address kube-apiserver listens on and
// advertises (loopback by default), its port, a command prefix every
// process runs under (`nsenter --net=/run/netns/<name>` for a network
// namespace), extra flags and feature gates, and the users its static
// token file holds.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// K8sVersion is the version of the pinned control plane, as in the Makefile.
const K8sVersion = "v1.37.2"

// Names of the control plane's binaries, in BinDir.
const (
	Etcd                  = "etcd"
	APIServer             = "kube-apiserver"
	Kubectl               = "kubectl"
	ControllerManager     = "kube-controller-manager"
	Scheduler             = "kube-scheduler"
	defaultServiceCIDR    = "10.0.0.0/24"
	masters               = "system:masters"
	apiServerStopGrace    = 15 * time.Second
	apiServerReadyTimeout = 90 * time.Second
)

// BinDir is where hack/build-controlplane.sh puts the binaries of the
// pinned control plane under the repository root, or KUBEBUILDER_ASSETS.
func BinDir(root string) string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(root, "bin", "k8s", K8sVersion)
}

// Options say how to start the control plane.
type Options struct {
	// BinDir holds etcd, kube-apiserver and the components asked for.
	// Required.
	BinDir string
	// Dir receives the kubeconfigs, the PKI (Dir/pki), etcd's data and
	// one log file per process. Required; created if missing; made
	// absolute.
	Dir string
	// Name names the cluster and its context in the kubeconfigs; the
	// admin is the user <Name>-admin, in group system:masters. Default
	// "local".
	Name string
	// Progress, if set, receives a line per step.
	Progress io.Writer
	// Address is where kube-apiserver advertises itself and where clients
	// reach it; default 127.0.0.1.
	Address net.IP
	// BindAddress is where kube-apiserver listens; default Address.
	BindAddress net.IP
	// Port is kube-apiserver's secure port; default a free loopback port.
	Port int
	// Prefix is a command every process of the cluster runs under, such as
	// nsenter --net=/run/netns/<name> to run it in a network namespace.
	Prefix []string
	// ServiceCIDR is --service-cluster-ip-range; default 10.0.0.0/24. Its
	// first address (the kubernetes Service's) is on the serving certificate.
	ServiceCIDR string
	// ServingIPs and ServingDNSNames are added to the serving
	// certificate's names (loopback, Address, the kubernetes Service's IP
	// and names, localhost).
	ServingIPs      []net.IP
	ServingDNSNames []string
	// ServiceAccountIssuer is --service-account-issuer; default the
	// server's URL.
	ServiceAccountIssuer string
	// Authorization is --authorization-mode; default RBAC (Node,RBAC for
	// real kubelets).
	Authorization string
	// APIServerFlags are added to kube-apiserver's (--name=value).
	APIServerFlags []string
	// FeatureGates (Name=true) are every component's --feature-gates.
	FeatureGates []string
	// WorkloadAPI serves the Workload API (WorkloadAPIServerFlags) and
	// turns on its gang scheduling in kube-scheduler.
	WorkloadAPI bool
	// CRDPaths are CRD files or directories installed once kube-apiserver
	// is ready.
	CRDPaths []string
	// Users are the identities the static token file holds besides the
	// admin; Kubeconfig writes a kubeconfig for each.
	Users []User
	// ControllerManager and Scheduler, if set, are started once the CRDs
	// are installed.
	ControllerManager, Scheduler *Component
}

// Component is how to run kube-controller-manager or kube-scheduler.
type Component struct {
	// User is the identity it runs as; default the admin.
	User string
	// Port is its secure port, on 127.0.0.1; default a free port.
	Port int
	// Flags are added to the harness's: its kubeconfigs, no leader
	// election, its port and certificate directory, the feature gates,
	// and for kube-controller-manager the service account key and root CA
	// (--controllers=garbagecollector runs only the garbage collector).
	Flags []string
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	// Kubeconfig is the admin's kubeconfig.
	Kubeconfig string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Dir is Options.Dir.
	Dir string
	// PKI is the control plane's credentials.
	PKI *PKI

	opts     Options
	admin    string
	etcdURL  string
	etcdArgs []string
	apiArgs  []string
	// processMu guards etcd and apiserver, which restarts replace, and
	// processes, started by StartComponent and Run, in order.
	processMu sync.Mutex
	etcd      *Process
	apiserver *Process
	processes []*Process
	// ports are every port the cluster picked for itself or handed out.
	portsMu sync.Mutex
	ports   []int
}

// Start starts etcd and kube-apiserver, installs the CRDs, starts the
// components asked for, and returns once kube-apiserver is ready. On error
// everything already started is stopped.
func Start(ctx context.Context, opts Options) (cp *ControlPlane, err error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	cp = &ControlPlane{Dir: opts.Dir, Kubeconfig: filepath.Join(opts.Dir, "kubeconfig"), opts: opts, admin: opts.Name + "-admin"}
	defer func() {
		if err != nil {
			_ = cp.Stop()
			cp = nil
		}
	}()
	if err := cp.startEtcd(); err != nil {
		return cp, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return cp, err
	}
	if len(opts.CRDPaths) > 0 {
		cp.step("installing the CRDs of %v", opts.CRDPaths)
		if _, err := envtest.InstallCRDs(cp.Config, envtest.CRDInstallOptions{Paths: opts.CRDPaths, ErrorIfPathMissing: true}); err != nil {
			return cp, fmt.Errorf("installing CRDs: %w", err)
		}
	}
	for _, c := range []struct {
		name string
		comp *Component
	}{{ControllerManager, opts.ControllerManager}, {Scheduler, opts.Scheduler}} {
		if c.comp != nil {
			cp.step("starting %s", c.name)
			if _, err := cp.StartComponent(c.name, *c.comp); err != nil {
				return cp, err
			}
		}
	}
	return cp, nil
}

// defaults checks the required options and fills in the others.
func (o *Options) defaults() error {
	if o.BinDir == "" || o.Dir == "" {
		return errors.New("controlplane: BinDir and Dir are required")
	}
	var missing []string
	for _, bin := range o.binaries() {
		if _, err := os.Stat(filepath.Join(o.BinDir, bin)); err != nil {
			missing = append(missing, filepath.Join(o.BinDir, bin))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("controlplane: missing %v: hack/build-controlplane.sh builds them", missing)
	}
	// Absolute, for the processes' flags wherever they run.
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return err
	}
	o.Dir = dir
	if o.Name == "" {
		o.Name = "local"
	}
	if o.Address == nil {
		o.Address = net.ParseIP("127.0.0.1")
	}
	if o.BindAddress == nil {
		o.BindAddress = o.Address
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = defaultServiceCIDR
	}
	if o.Authorization == "" {
		o.Authorization = "RBAC"
	}
	return nil
}

// binaries are the binaries these options run.
func (o *Options) binaries() []string {
	bins := []string{Etcd, APIServer}
	if o.ControllerManager != nil {
		bins = append(bins, ControllerManager)
	}
	if o.Scheduler != nil {
		bins = append(bins, Scheduler)
	}
	return bins
}

func (cp *ControlPlane) step(format string, args ...any) {
	if cp.opts.Progress != nil {
		_, _ = fmt.Fprintf(cp.opts.Progress, "  "+format+"\n", args...)
	}
}

// Server is kube-apiserver's URL.
func (cp *ControlPlane) Server() string { return cp.Config.Host }

// APIServerPid is the process ID of the running kube-apiserver, for a
// benchmark that reads its CPU time.
func (cp *ControlPlane) APIServerPid() int {
	cp.processMu.Lock()
	defer cp.processMu.Unlock()
	return cp.apiserver.Pid()
}

// EtcdPid is the process ID of the running etcd.
func (cp *ControlPlane) EtcdPid() int {
	cp.processMu.Lock()
	defer cp.processMu.Unlock()
	return cp.etcd.Pid()
}

// startEtcd starts etcd on free loopback ports (in Prefix's network).
func (cp *ControlPlane) startEtcd() error {
	clientPort, err := cp.FreePort()
	if err != nil {
		return err
	}
	peerPort, err := cp.FreePort()
	if err != nil {
		return err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	cp.etcdURL = clientURL
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	cp.step("starting etcd on %s", clientURL)
	cp.etcdArgs = []string{
		"--data-dir=" + filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls=" + clientURL,
		"--advertise-client-urls=" + clientURL,
		"--listen-peer-urls=" + peerURL,
		"--initial-advertise-peer-urls=" + peerURL,
		"--initial-cluster=default=" + peerURL,
		"--unsafe-no-fsync=true",
	}
	p, err := cp.start(Etcd, filepath.Join(cp.opts.BinDir, Etcd), cp.etcdArgs...)
	cp.processMu.Lock()
	cp.etcd = p
	cp.processMu.Unlock()
	return err
}

// start starts a process under Prefix, logging to <name>.log in Dir.
func (cp *ControlPlane) start(name, path string, args ...string) (*Process, error) {
	return cp.startIn(cp.opts.Prefix, name, path, args...)
}

// startIn starts a process under prefix, logging to <name>.log in Dir.
func (cp *ControlPlane) startIn(prefix []string, name, path string, args ...string) (*Process, error) {
	line := append(append(append([]string{}, prefix...), path), args...)
	return StartProcess(name, filepath.Join(cp.Dir, name+".log"), nil, line[0], line[1:]...)
}

// Run starts a process of the cluster beside the control plane (kwok, a
// kubelet, containerd) under Prefix, logging to <name>.log in Dir. Check
// watches it and Stop stops it, before the components and the control
// plane, in the reverse order of their starts.
func (cp *ControlPlane) Run(name, path string, args ...string) (*Process, error) {
	return cp.RunIn(cp.opts.Prefix, name, path, args...)
}

// RunIn is Run under prefix in place of Options.Prefix: a node's process
// in a network namespace of its own. A name with a slash (node/kubelet)
// logs in a subdirectory of Dir, which must exist.
func (cp *ControlPlane) RunIn(prefix []string, name, path string, args ...string) (*Process, error) {
	p, err := cp.startIn(prefix, name, path, args...)
	if err != nil {
		return nil, err
	}
	cp.processMu.Lock()
	cp.processes = append(cp.processes, p)
	cp.processMu.Unlock()
	return p, nil
}

// Forget stops watching p, a process Run started that is stopped on
// purpose (a node's kubelet restarted, a node lost): Check no longer
// reports its exit and Stop no longer stops it.
func (cp *ControlPlane) Forget(p *Process) {
	cp.processMu.Lock()
	defer cp.processMu.Unlock()
	cp.processes = slices.DeleteFunc(cp.processes, func(q *Process) bool { return q == p })
}

// StartComponent starts kube-controller-manager or kube-scheduler (name)
// as comp says, and returns its process, which Check and Stop cover.
func (cp *ControlPlane) StartComponent(name string, comp Component) (*Process, error) {
	if comp.User == "" {
		comp.User = cp.admin
	}
	kubeconfig := filepath.Join(cp.Dir, comp.User+".kubeconfig")
	if comp.User == cp.admin {
		kubeconfig = cp.Kubeconfig
	} else if err := cp.WriteKubeconfig(kubeconfig, comp.User); err != nil {
		return nil, err
	}
	if comp.Port == 0 {
		port, err := cp.FreePort()
		if err != nil {
			return nil, err
		}
		comp.Port = port
	}
	args := []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(comp.Port),
		"--cert-dir=" + filepath.Join(cp.Dir, name),
	}
	if gates := cp.featureGates(name); gates != "" {
		args = append(args, "--feature-gates="+gates)
	}
	if name == ControllerManager {
		args = append(args, "--service-account-private-key-file="+cp.PKI.ServiceAccountKeyFile, "--root-ca-file="+cp.PKI.CAFile)
	}
	return cp.Run(name, filepath.Join(cp.opts.BinDir, name), append(args, comp.Flags...)...)
}

// StopComponent stops a process StartComponent or Run started, and stops
// tracking it: Check no longer counts its exit.
func (cp *ControlPlane) StopComponent(p *Process) error {
	cp.processMu.Lock()
	cp.processes = slices.DeleteFunc(cp.processes, func(q *Process) bool { return q == p })
	cp.processMu.Unlock()
	return p.Stop(10 * time.Second)
}

// UserConfig is a client configuration of user (the admin or one of
// Options.Users).
func (cp *ControlPlane) UserConfig(user string) *rest.Config {
	cfg := rest.CopyConfig(cp.Config)
	cfg.BearerToken = cp.PKI.Token(user)
	return cfg
}

// WriteKubeconfig writes a kubeconfig of user (the admin or one of
// Options.Users) to path.
func (cp *ControlPlane) WriteKubeconfig(path, user string) error {
	name := cp.opts.Name
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: cp.Server(), CertificateAuthorityData: cp.PKI.CA.CertPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: cp.PKI.Token(user)}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: user, Namespace: "default"}
	cfg.CurrentContext = name
	return clientcmd.WriteToFile(*cfg, path)
}

// Check returns an error if a process of the cluster has exited.
func (cp *ControlPlane) Check() error {
	cp.processMu.Lock()
	procs := append([]*Process{cp.etcd, cp.apiserver}, cp.processes...)
	cp.processMu.Unlock()
	for _, p := range procs {
		if p == nil {
			continue
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.LogPath)
		}
	}
	return nil
}

// WaitFor polls done every 200 ms until it holds, and fails when a process
// of the cluster exits, ctx ends, or timeout passes.
func (cp *ControlPlane) WaitFor(ctx context.Context, what string, timeout time.Duration, done func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := cp.Check(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s; see the logs in %s", timeout, what, cp.Dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Stop stops what Run and StartComponent started, in the reverse order,
// then kube-apiserver and etcd. Dir is kept, for its logs.
func (cp *ControlPlane) Stop() error {
	if cp == nil {
		return nil
	}
	cp.processMu.Lock()
	procs := cp.processes
	cp.processes = nil
	cp.processMu.Unlock()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		errs = append(errs, procs[i].Stop(apiServerStopGrace))
	}
	cp.processMu.Lock()
	last := []*Process{cp.apiserver, cp.etcd}
	cp.processMu.Unlock()
	for _, p := range last {
		if p != nil {
			errs = append(errs, p.Stop(apiServerStopGrace))
		}
	}
	return errors.Join(errs...)
}

// FreePort is a free loopback port that is none of the ports the cluster
// picked or handed out before: a process started on it (an operator's
// probe, say) never takes the port of a process that was just killed, nor
// kube-apiserver's while it restarts.
func (cp *ControlPlane) FreePort() (int, error) {
	cp.portsMu.Lock()
	defer cp.portsMu.Unlock()
	for range 100 {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		if !slices.Contains(cp.ports, port) {
			cp.ports = append(cp.ports, port)
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port that the cluster has not used")
}

// Clientset is a clientset of the admin.
func (cp *ControlPlane) Clientset() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(cp.Config)
}
