// Package nodecluster starts a throwaway one-node Kubernetes cluster that
// runs real containers, for make node-cluster and the node specs (test/node):
// etcd, kube-apiserver, kube-controller-manager (with every default
// controller: the garbage collector, pod GC, EndpointSlices, service
// accounts, the built-in Job controller), kube-scheduler, kube-proxy in
// iptables mode, and one kubelet on containerd and runc with a bridge CNI.
//
// Kubernetes' binaries come from the pinned control plane
// (bin/k8s/<version>, hack/build-controlplane.sh); containerd, runc, the CNI
// plugins, iptables and iproute2 are Debian's packages (make node-prereqs).
// Nothing is pulled: the pod sandbox, the workload and the operator's own
// image are imported into containerd from the OCI layouts make node-images
// writes.
//
// Everything runs in a network namespace of its own (see network.go) and
// needs root. The kubelet uses the cgroupfs driver on this host's cgroup v1
// hierarchies, which Kubernetes 1.35 and later refuse unless told
// (failCgroupV1: false).
package nodecluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// NodeName is the name of the cluster's one node.
const NodeName = "ibj-node"

// apiserverPort is the API server's port on the node's address: the
// network namespace is the cluster's own, so a fixed port is free.
const apiserverPort = 6443

// Options says where the binaries and images are and where to put state.
type Options struct {
	// Root is the repository root. Required.
	Root string
	// Dir receives the kubeconfigs, certificates, etcd's, containerd's and
	// the kubelet's state and one log file per component. Required;
	// created if missing.
	Dir string
	// ImagesDir holds the OCI layouts of make node-images (pause, worker,
	// manager); default Root/dist/node-images.
	ImagesDir string
	// Progress, if set, receives a line per step.
	Progress io.Writer
}

// Cluster is a running cluster.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig (group system:masters).
	Kubeconfig string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Dir is Options.Dir.
	Dir string
	// NodeIP is the node's address, where this host reaches the API server.
	NodeIP net.IP

	net       *network
	certs     *pki
	socket    string // containerd's
	runDir    string // sockets, under /run: a unix socket's path is short
	processes []*kwokcluster.Process
	kubelet   *kwokcluster.Process
	// netnsBefore are the network namespaces of this host before the
	// cluster started: the pods' that containerd leaves when its
	// containers are killed are the others named cni-*.
	netnsBefore map[string]bool
}

// Prerequisites lists what Start needs that this host lacks, each with
// the command that provides it.
func Prerequisites(root, imagesDir string) []string {
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root (the kubelet, containerd and the network namespace need it)")
	}
	bin := kwokcluster.ControlPlaneDir(root)
	for _, name := range []string{"etcd", "kube-apiserver", "kubectl", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			missing = append(missing, filepath.Join(bin, name)+" (make node-binaries)")
		}
	}
	for _, cmd := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "nsenter", "iptables", "sysctl"} {
		if _, err := exec.LookPath(cmd); err != nil {
			missing = append(missing, cmd+" (make node-prereqs)")
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, plugin)+" (make node-prereqs)")
		}
	}
	for _, img := range images {
		if _, err := os.Stat(filepath.Join(imagesDir, img.layout, "index.json")); err != nil {
			missing = append(missing, filepath.Join(imagesDir, img.layout)+" (make node-images)")
		}
	}
	return missing
}

// Start starts the cluster and returns once its node is Ready and the
// default namespace's service account exists. On error everything already
// started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Root == "" || opts.Dir == "" {
		return nil, errors.New("nodecluster: Root and Dir are required")
	}
	if opts.ImagesDir == "" {
		opts.ImagesDir = filepath.Join(opts.Root, "dist", "node-images")
	}
	if missing := Prerequisites(opts.Root, opts.ImagesDir); len(missing) > 0 {
		return nil, fmt.Errorf("nodecluster: missing %s", strings.Join(missing, "; "))
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	step := func(format string, args ...any) { _, _ = fmt.Fprintf(progress, "  "+format+"\n", args...) }
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig")}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()

	c.netnsBefore = netnsNames()
	step("creating the network namespace")
	if c.net, err = newNetwork(); err != nil {
		return c, err
	}
	c.NodeIP = c.net.node
	step("network namespace %s: node %s, pods %s, services %s", c.net.name, c.net.node, c.net.pods, c.net.svcs)
	c.runDir = filepath.Join("/run", c.net.name)
	if err := os.MkdirAll(c.runDir, 0o755); err != nil {
		return c, err
	}
	c.certs, err = newPKI(filepath.Join(dir, "pki"), NodeName, []net.IP{c.net.node, c.net.kubernetesIP})
	if err != nil {
		return c, err
	}
	bin := kwokcluster.ControlPlaneDir(opts.Root)

	step("starting etcd")
	if _, err := c.start("etcd", filepath.Join(bin, "etcd"),
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--unsafe-no-fsync=true",
	); err != nil {
		return c, err
	}

	server := "https://" + net.JoinHostPort(c.net.node.String(), strconv.Itoa(apiserverPort))
	step("starting kube-apiserver on %s", server)
	if _, err := c.start("kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		"--advertise-address="+c.net.node.String(),
		"--secure-port="+strconv.Itoa(apiserverPort),
		"--cert-dir="+c.certs.dir,
		"--tls-cert-file="+c.certs.certFile,
		"--tls-private-key-file="+c.certs.keyFile,
		"--client-ca-file="+c.certs.caFile,
		"--token-auth-file="+c.certs.tokenFile,
		"--kubelet-client-certificate="+c.certs.kubeletClientCert,
		"--kubelet-client-key="+c.certs.kubeletClientKey,
		// The node's name resolves nowhere: reach the kubelet by address.
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range="+c.net.svcs,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+c.certs.saKeyFile,
		"--service-account-signing-key-file="+c.certs.saKeyFile,
		"--allow-privileged=true",
	); err != nil {
		return c, err
	}
	c.Config = &rest.Config{
		Host:            server,
		BearerToken:     c.certs.identities[admin].token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.certs.caCert},
		QPS:             50,
		Burst:           100,
	}
	kubeconfigs := map[string]string{}
	for name := range c.certs.identities {
		path := filepath.Join(dir, name+".kubeconfig")
		if name == admin {
			path = c.Kubeconfig
		}
		if err := c.writeKubeconfig(path, name); err != nil {
			return c, err
		}
		kubeconfigs[name] = path
	}
	clientset, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return c, err
	}
	if err := c.waitFor(ctx, "kube-apiserver to be ready", 90*time.Second, func() bool {
		body, err := clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	}); err != nil {
		return c, err
	}

	step("starting kube-controller-manager and kube-scheduler")
	if _, err := c.start("kube-controller-manager", filepath.Join(bin, "kube-controller-manager"),
		"--kubeconfig="+kubeconfigs[controller],
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--service-account-private-key-file="+c.certs.saKeyFile,
		"--root-ca-file="+c.certs.caFile,
		// Each controller as its own service account, with the role
		// Kubernetes' bootstrap RBAC gives it (as kubeadm runs it).
		"--use-service-account-credentials=true",
		"--cluster-name=ibj-node",
	); err != nil {
		return c, err
	}
	if _, err := c.start("kube-scheduler", filepath.Join(bin, "kube-scheduler"),
		"--kubeconfig="+kubeconfigs[scheduler],
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	); err != nil {
		return c, err
	}

	step("starting containerd and importing the images of %s", opts.ImagesDir)
	if err := c.startContainerd(opts.ImagesDir); err != nil {
		return c, err
	}

	step("starting kube-proxy (iptables) and the kubelet")
	if _, err := c.start("kube-proxy", filepath.Join(bin, "kube-proxy"),
		"--kubeconfig="+kubeconfigs[proxy],
		"--proxy-mode=iptables",
		"--cluster-cidr="+c.net.pods,
		"--hostname-override="+NodeName,
		// Conntrack's limits and timeouts are the kernel's, shared by
		// every namespace: leave them as this host has them.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:10249",
		"--healthz-bind-address=127.0.0.1:10256",
	); err != nil {
		return c, err
	}
	if err := c.startKubelet(filepath.Join(bin, "kubelet"), kubeconfigs[kubeletID]); err != nil {
		return c, err
	}
	if err := c.waitFor(ctx, "the node to be Ready", 120*time.Second, func() bool {
		node, err := clientset.CoreV1().Nodes().Get(ctx, NodeName, metav1.GetOptions{})
		return err == nil && kwokcluster.NodeReady(node) && !tainted(node)
	}); err != nil {
		return c, err
	}
	if err := c.waitFor(ctx, "the default service account", 60*time.Second, func() bool {
		_, err := clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return c, err
	}
	step("cluster ready: KUBECONFIG=%s", c.Kubeconfig)
	return c, nil
}

// start starts a component in the cluster's network namespace.
func (c *Cluster) start(name, path string, args ...string) (*kwokcluster.Process, error) {
	line := c.net.exec(append([]string{path}, args...)...)
	p, err := kwokcluster.StartProcess(name, filepath.Join(c.Dir, name+".log"), nil, line[0], line[1:]...)
	if err != nil {
		return nil, err
	}
	c.processes = append(c.processes, p)
	return p, nil
}

func (c *Cluster) startContainerd(imagesDir string) error {
	cniConf := filepath.Join(c.Dir, "cni", "net.d")
	if err := os.MkdirAll(cniConf, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cniConf, "10-ibj.conflist"), []byte(cniConfig(c.net.pods)), 0o644); err != nil {
		return err
	}
	c.socket = filepath.Join(c.runDir, "containerd.sock")
	config := filepath.Join(c.Dir, "containerd.toml")
	data := containerdConfig(filepath.Join(c.Dir, "containerd"), filepath.Join(c.runDir, "containerd"), c.socket, cniConf)
	if err := os.WriteFile(config, []byte(data), 0o644); err != nil {
		return err
	}
	p, err := c.start("containerd", "containerd", "--config", config)
	if err != nil {
		return err
	}
	if err := c.waitFor(context.Background(), "containerd", 30*time.Second, func() bool {
		if exited, _ := p.Exited(); exited {
			return true
		}
		return exec.Command("ctr", "--address", c.socket, "version").Run() == nil
	}); err != nil {
		return err
	}
	if err := c.Check(); err != nil {
		return err
	}
	return importImages(c.socket, imagesDir)
}

// kubeletConfig is the kubelet's configuration: cgroupfs on this host's
// cgroup v1, authentication of the API server by the cluster's CA and of
// everyone else by token review, no eviction for a busy disk, and no image
// garbage collection (an image removed here cannot be pulled again).
func (c *Cluster) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://%s
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %s
authorization:
  mode: Webhook
clusterDomain: cluster.local
resolvConf: ""
failSwapOn: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
nodeStatusUpdateFrequency: 5s
`, c.socket, c.net.node, c.certs.caFile)
}

func (c *Cluster) startKubelet(path, kubeconfig string) error {
	config := filepath.Join(c.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, []byte(c.kubeletConfig()), 0o644); err != nil {
		return err
	}
	p, err := c.start("kubelet", path,
		"--config="+config,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(c.Dir, "kubelet"),
		"--hostname-override="+NodeName,
		"--node-ip="+c.net.node.String(),
		"--v=2",
	)
	c.kubelet = p
	return err
}

func (c *Cluster) writeKubeconfig(path, name string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["ibj-node"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: c.certs.caCert}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: c.certs.identities[name].token}
	cfg.Contexts["ibj-node"] = &clientcmdapi.Context{Cluster: "ibj-node", AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = "ibj-node"
	return clientcmd.WriteToFile(*cfg, path)
}

// waitFor polls done until it holds, a component exits, or timeout.
func (c *Cluster) waitFor(ctx context.Context, what string, timeout time.Duration, done func() bool) error {
	deadline := time.Now().Add(timeout)
	for {
		if err := c.Check(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if done() {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited %s for %s; see the logs in %s", timeout, what, c.Dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Check returns an error if a component has exited.
func (c *Cluster) Check() error {
	for _, p := range c.processes {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.LogPath)
		}
	}
	return nil
}

// Stop stops every component and removes what they left on this host:
// the containers, their mounts, the network namespace. Dir is kept, for
// its logs.
func (c *Cluster) Stop() error {
	var errs []error
	// The kubelet first, so that nothing restarts the containers killed
	// next; containerd after them; the control plane last.
	if c.kubelet != nil {
		errs = append(errs, c.kubelet.Stop(10*time.Second))
	}
	if c.socket != "" {
		killContainers(c.socket)
	}
	for i := len(c.processes) - 1; i >= 0; i-- {
		errs = append(errs, c.processes[i].Stop(15*time.Second))
	}
	c.processes = nil
	if c.socket != "" {
		// Shims whose containers are gone exit by themselves; any left
		// would hold the namespace's mounts.
		_ = exec.Command("pkill", "-KILL", "-f", "containerd-shim-runc-v2 .*-address "+c.socket).Run()
	}
	errs = append(errs, unmountUnder(c.Dir, c.runDir))
	for name := range netnsNames() {
		if strings.HasPrefix(name, "cni-") && c.netnsBefore != nil && !c.netnsBefore[name] {
			if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", name, err, out))
			}
		}
	}
	if c.net != nil {
		errs = append(errs, c.net.delete())
		c.net = nil
	}
	if c.runDir != "" {
		_ = os.RemoveAll(c.runDir)
	}
	return errors.Join(errs...)
}

// netnsNames are the network namespaces ip netns lists.
func netnsNames() map[string]bool {
	names := map[string]bool{}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

// tainted reports whether the node still has a taint that keeps pods off:
// the node lifecycle controller lifts not-ready once the node is Ready.
func tainted(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return true
		}
	}
	return false
}
