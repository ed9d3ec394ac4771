package controlplane

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// WorkloadAPIFeatureGate is the feature gate of Kubernetes' Workload API
// (KEP-4671): on kube-apiserver it serves the API and keeps a pod's
// spec.schedulingGroup, on kube-scheduler it adds the GangScheduling
// plugin to the default profile (it holds a PodGroup's pods in Permit
// until minCount of them have a place, then binds them together).
const WorkloadAPIFeatureGate = "GenericWorkload=true"

// WorkloadSchedulingFeatureGates are the feature gates of every part of
// spec.scheduling on Kubernetes 1.37 (kube-apiserver and kube-scheduler):
// the Workload API, topology constraints
// (TopologyAwareWorkloadScheduling, alpha) and shared ResourceClaims
// (DRAWorkloadResourceClaims, beta and off by default). Without the last
// two, kube-apiserver drops a PodGroup's schedulingConstraints and
// resourceClaims.
const WorkloadSchedulingFeatureGates = WorkloadAPIFeatureGate + ",TopologyAwareWorkloadScheduling=true,DRAWorkloadResourceClaims=true"

// WorkloadAPIServerFlags are the kube-apiserver flags (name without
// dashes, value) that serve the Workload API: its feature gate, and its
// beta API version, which is off by default. Options.WorkloadAPI sets
// them; envtest's API server takes them as they are.
var WorkloadAPIServerFlags = map[string]string{
	"feature-gates":  WorkloadAPIFeatureGate,
	"runtime-config": workloadapi.GroupVersion.String() + "=true",
}

// kubernetesDNSNames are the kubernetes Service's names, on the serving
// certificate with localhost.
var kubernetesDNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// startAPIServer writes the PKI and the admin's kubeconfig, starts
// kube-apiserver and waits until it is ready.
func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	o := cp.opts
	port := o.Port
	if port == 0 {
		var err error
		if port, err = cp.FreePort(); err != nil {
			return err
		}
	}
	serviceIP, err := firstServiceIP(o.ServiceCIDR)
	if err != nil {
		return err
	}
	ips := append([]net.IP{net.ParseIP("127.0.0.1"), o.Address, serviceIP}, o.ServingIPs...)
	users := append([]User{{Name: cp.admin, Groups: []string{masters}}}, o.Users...)
	if cp.PKI, err = newPKI(filepath.Join(cp.Dir, "pki"), ips, append(kubernetesDNSNames, o.ServingDNSNames...), users); err != nil {
		return err
	}
	cp.Config = &rest.Config{
		Host:            "https://" + net.JoinHostPort(o.Address.String(), strconv.Itoa(port)),
		BearerToken:     cp.PKI.Token(cp.admin),
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.PKI.CA.CertPEM},
		QPS:             100,
		Burst:           200,
	}
	if err := cp.WriteKubeconfig(cp.Kubeconfig, cp.admin); err != nil {
		return err
	}
	cp.apiArgs = cp.apiServerArgs(port)
	cp.step("starting kube-apiserver on %s", cp.Server())
	return cp.StartAPIServer(ctx)
}

// apiServerArgs are kube-apiserver's flags: the PKI's files, a static
// token per user, RBAC, Options' addresses and flags.
func (cp *ControlPlane) apiServerArgs(port int) []string {
	o, p := cp.opts, cp.PKI
	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=" + o.BindAddress.String(),
		"--advertise-address=" + o.Address.String(),
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + p.Dir,
		"--tls-cert-file=" + p.CertFile,
		"--tls-private-key-file=" + p.KeyFile,
		"--client-ca-file=" + p.CAFile,
		"--token-auth-file=" + p.TokenFile,
		"--kubelet-client-certificate=" + p.KubeletClientCertFile,
		"--kubelet-client-key=" + p.KubeletClientKeyFile,
		"--authorization-mode=" + o.Authorization,
		"--service-cluster-ip-range=" + o.ServiceCIDR,
		"--service-account-issuer=" + cmp.Or(o.ServiceAccountIssuer, cp.Server()),
		"--service-account-key-file=" + p.ServiceAccountKeyFile,
		"--service-account-signing-key-file=" + p.ServiceAccountKeyFile,
		"--allow-privileged=true",
	}
	if o.Address.IsLoopback() {
		// Since 1.37 the endpoint reconciler refuses a loopback address,
		// and nothing on loopback reads the kubernetes Service's endpoints.
		args = append(args, "--endpoint-reconciler-type=none")
	}
	if gates := cp.featureGates(APIServer); gates != "" {
		args = append(args, "--feature-gates="+gates)
	}
	if o.WorkloadAPI {
		args = append(args, "--runtime-config="+WorkloadAPIServerFlags["runtime-config"])
	}
	return append(args, o.APIServerFlags...)
}

// featureGates is component's --feature-gates: Options.FeatureGates, and
// the Workload API's on kube-apiserver and kube-scheduler.
func (cp *ControlPlane) featureGates(component string) string {
	gates := cp.opts.FeatureGates
	if cp.opts.WorkloadAPI && (component == APIServer || component == Scheduler) {
		gates = append(gates[:len(gates):len(gates)], WorkloadAPIFeatureGate)
	}
	return strings.Join(gates, ",")
}

// firstServiceIP is the first address of a Service CIDR: the kubernetes
// Service's cluster IP.
func firstServiceIP(cidr string) (net.IP, error) {
	_, network, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("the Service CIDR: %w", err)
	}
	ip := append(net.IP{}, network.IP...)
	ip[len(ip)-1]++
	return ip, nil
}

// StartAPIServer starts kube-apiserver (again) with the same flags on the
// same port and returns once it is ready.
func (cp *ControlPlane) StartAPIServer(ctx context.Context) error {
	p, err := cp.start(APIServer, filepath.Join(cp.opts.BinDir, APIServer), cp.apiArgs...)
	if err != nil {
		return err
	}
	cp.processMu.Lock()
	cp.apiserver = p
	cp.processMu.Unlock()
	return cp.WaitReady(ctx)
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 15 s)
// and leaves it stopped: every client's requests fail until
// StartAPIServer.
func (cp *ControlPlane) StopAPIServer() error {
	return cp.apiserver.Stop(apiServerStopGrace)
}

// RestartAPIServer stops kube-apiserver as a rollout of it would (SIGTERM,
// then SIGKILL after 15 s), starts it again with the same flags on the same
// port, and returns once it is ready. Clients see their connections drop and
// their watches end, and must recover by themselves.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	if err := cp.StopAPIServer(); err != nil {
		return err
	}
	return cp.StartAPIServer(ctx)
}

// RestartEtcd stops etcd (SIGTERM, then SIGKILL after 15 s) and starts it
// again on the same data directory, so nothing stored is lost, and returns
// once kube-apiserver is ready again.
func (cp *ControlPlane) RestartEtcd(ctx context.Context) error {
	if err := cp.etcd.Stop(apiServerStopGrace); err != nil {
		return err
	}
	p, err := cp.start(Etcd, filepath.Join(cp.opts.BinDir, Etcd), cp.etcdArgs...)
	if err != nil {
		return err
	}
	cp.processMu.Lock()
	cp.etcd = p
	cp.processMu.Unlock()
	return cp.WaitReady(ctx)
}

// WaitReady polls kube-apiserver's /readyz for up to 90 s until it says ok.
func (cp *ControlPlane) WaitReady(ctx context.Context) error {
	cfg := rest.CopyConfig(cp.Config)
	cfg.Timeout = 2 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return cp.WaitFor(ctx, "kube-apiserver to be ready", apiServerReadyTimeout, func() bool {
		body, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	})
}
