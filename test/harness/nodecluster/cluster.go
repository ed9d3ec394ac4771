// Package nodecluster starts a throwaway Kubernetes cluster of real nodes
// that runs real containers, for make node-cluster and the node specs
// (test/node): etcd, kube-apiserver, kube-controller-manager (with every
// default controller: the garbage collector, node lifecycle and taint
// eviction, pod GC, EndpointSlices, service accounts, the built-in Job
// controller) and kube-scheduler, and Options.Nodes nodes, each a kubelet on
// a containerd of its own and runc with a bridge CNI, and a kube-proxy in
// iptables mode. Its methods inflict the failures of a real cluster: a node
// lost (StopNode), a kubelet or containerd restarted, the out-of-service
// taint.
//
// Kubernetes' binaries come from the pinned control plane
// (bin/k8s/<version>, hack/build-controlplane.sh); containerd, runc, the CNI
// plugins, iptables and iproute2 are Debian's packages (make node-prereqs).
// Nothing is pulled: the pod sandbox, the workload and the operator's own
// image are imported into each node's containerd from the OCI layouts make
// node-images writes.
//
// The control plane and each node run in network namespaces of their own
// (see network.go), each node in a cgroup parent of its own (cgroups.go);
// it needs root. The kubelets use the cgroupfs driver on this host's cgroup
// v1 hierarchies, which Kubernetes 1.35 and later refuse unless told
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
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// apiserverPort is the API server's port on the control plane's address:
// the network namespace is the cluster's own, so a fixed port is free.
const apiserverPort = 6443

// Options says where the binaries and images are, where to put state, how
// many nodes to run and how fast the cluster gives up on a lost node.
type Options struct {
	// Root is the repository root. Required.
	Root string
	// Dir receives the kubeconfigs, certificates, etcd's state, a
	// directory per node (its containerd's and kubelet's state) and one
	// log file per component. Required; created if missing.
	Dir string
	// ImagesDir holds the OCI layouts of make node-images (pause, worker,
	// manager); default Root/dist/node-images.
	ImagesDir string
	// Progress, if set, receives a line per step.
	Progress io.Writer
	// Nodes is how many nodes to run, from 1 to MaxNodes; default 2.
	Nodes int
	// NodeMonitorGracePeriod is how long kube-controller-manager's node
	// lifecycle controller waits for a node's heartbeat before it marks
	// the node Unknown and taints it unreachable; default 20s
	// (Kubernetes' own: 50s). The kubelets renew their leases every
	// eighth of it.
	NodeMonitorGracePeriod time.Duration
	// NodeMonitorPeriod is how often that controller checks the nodes;
	// default 2s (Kubernetes' own: 5s).
	NodeMonitorPeriod time.Duration
	// NotReadyTolerationSeconds and UnreachableTolerationSeconds are the
	// tolerationSeconds the DefaultTolerationSeconds admission plugin
	// gives every pod for the not-ready and unreachable taints: how long
	// a pod stays bound to a lost node before the taint eviction
	// controller deletes it; default 10 (Kubernetes' own: 300).
	NotReadyTolerationSeconds, UnreachableTolerationSeconds int
	// TerminatedPodGCThreshold is how many terminated pods pod GC keeps;
	// default 1000 (Kubernetes' own: 12500).
	TerminatedPodGCThreshold int
}

func (o *Options) setDefaults() {
	if o.ImagesDir == "" {
		o.ImagesDir = filepath.Join(o.Root, "dist", "node-images")
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = 20 * time.Second
	}
	if o.NodeMonitorPeriod == 0 {
		o.NodeMonitorPeriod = 2 * time.Second
	}
	if o.NotReadyTolerationSeconds == 0 {
		o.NotReadyTolerationSeconds = 10
	}
	if o.UnreachableTolerationSeconds == 0 {
		o.UnreachableTolerationSeconds = 10
	}
	if o.TerminatedPodGCThreshold == 0 {
		o.TerminatedPodGCThreshold = 1000
	}
}

// Cluster is a running cluster.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig (group system:masters).
	Kubeconfig string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Dir is Options.Dir.
	Dir string
	// APIServerIP is the control plane's address, where this host reaches
	// the API server.
	APIServerIP net.IP
	// Nodes are the nodes' names: ibj-node-0 to ibj-node-<Nodes-1>.
	Nodes []string

	opts        Options
	bin         string // Kubernetes' binaries
	net         *network
	certs       *pki
	clientset   kubernetes.Interface
	kubeconfigs map[string]string // by identity
	// processes are the control plane's, in the order started.
	processes []*kwokcluster.Process
	nodes     []*node
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
		missing = append(missing, "root (the kubelet, containerd and the network namespaces need it)")
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

// Start starts the cluster and returns once every node is Ready and the
// default namespace's service account exists. On error everything already
// started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Root == "" || opts.Dir == "" {
		return nil, errors.New("nodecluster: Root and Dir are required")
	}
	opts.setDefaults()
	if missing := Prerequisites(opts.Root, opts.ImagesDir); len(missing) > 0 {
		return nil, fmt.Errorf("nodecluster: missing %s", strings.Join(missing, "; "))
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{Dir: dir, Kubeconfig: filepath.Join(dir, "kubeconfig"), opts: opts, bin: kwokcluster.ControlPlaneDir(opts.Root)}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	c.netnsBefore = netnsNames()
	if err := c.setUp(); err != nil {
		return c, err
	}
	if err := c.startControlPlane(ctx); err != nil {
		return c, err
	}
	for i := range c.Nodes {
		c.step("starting node %s: containerd (importing the images of %s), kube-proxy, the kubelet", c.Nodes[i], opts.ImagesDir)
		if err := c.bootNode(i, true); err != nil {
			return c, err
		}
	}
	for i := range c.Nodes {
		if err := c.WaitNodeReady(ctx, i, 2*time.Minute); err != nil {
			return c, err
		}
	}
	if err := c.waitFor(ctx, "the default service account", 60*time.Second, func() bool {
		_, err := c.clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return c, err
	}
	c.step("cluster ready: KUBECONFIG=%s", c.Kubeconfig)
	return c, nil
}

// step reports a step of Start to Options.Progress.
func (c *Cluster) step(format string, args ...any) {
	if c.opts.Progress != nil {
		_, _ = fmt.Fprintf(c.opts.Progress, "  "+format+"\n", args...)
	}
}

// setUp creates the network namespaces, the credentials, the kubeconfigs
// and each node's directories and configuration.
func (c *Cluster) setUp() error {
	c.step("creating the network namespaces of %d nodes", c.opts.Nodes)
	var err error
	if c.net, err = newNetwork(c.opts.Nodes); err != nil {
		return err
	}
	c.APIServerIP = c.net.cp
	c.step("network namespace %s: the control plane at %s, services %s", c.net.name, c.net.cp, c.net.svcs)
	for i, n := range c.net.nodes {
		c.Nodes = append(c.Nodes, fmt.Sprintf("ibj-node-%d", i))
		c.step("network namespace %s: node %s at %s, pods %s", n.name, c.Nodes[i], n.ip, n.pods)
	}
	c.certs, err = newPKI(filepath.Join(c.Dir, "pki"), c.Nodes, []net.IP{c.net.cp, c.net.kubernetesIP})
	if err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(c.net.cp.String(), fmt.Sprint(apiserverPort))
	c.Config = &rest.Config{
		Host:            server,
		BearerToken:     c.certs.identities[admin].token,
		TLSClientConfig: rest.TLSClientConfig{CAData: c.certs.caCert},
		QPS:             50,
		Burst:           100,
	}
	c.kubeconfigs = map[string]string{}
	for name := range c.certs.identities {
		path := filepath.Join(c.Dir, name+".kubeconfig")
		if name == admin {
			path = c.Kubeconfig
		}
		if err := c.writeKubeconfig(path, name); err != nil {
			return err
		}
		c.kubeconfigs[name] = path
	}
	if c.clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	for i := range c.Nodes {
		n, err := c.newNode(i)
		if n != nil {
			c.nodes = append(c.nodes, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// startIn starts a component in a network namespace, its output appended
// to logPath.
func startIn(namespace, name, logPath, path string, args ...string) (*kwokcluster.Process, error) {
	line := nsExec(namespace, append([]string{path}, args...)...)
	return kwokcluster.StartProcess(name, logPath, nil, line[0], line[1:]...)
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

// Check returns an error if a component has exited that was not stopped
// on purpose (StopNode, RestartKubelet, RestartContainerd).
func (c *Cluster) Check() error {
	processes := c.processes
	for _, n := range c.nodes {
		processes = append(processes, n.running()...)
	}
	for _, p := range processes {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.LogPath)
		}
	}
	return nil
}

// Stop stops every component and removes what they left on this host:
// the containers, their mounts and cgroups, the network namespaces. Dir is
// kept, for its logs.
func (c *Cluster) Stop() error {
	var errs []error
	// The kubelets first, so that nothing restarts the containers killed
	// next; the containerds after them; the control plane last.
	for _, n := range c.nodes {
		if n.kubelet != nil {
			errs = append(errs, n.kubelet.Stop(10*time.Second))
			n.kubelet = nil
		}
		if n.containerd != nil {
			killContainers(n.socket)
		}
	}
	for _, n := range c.nodes {
		errs = append(errs, n.halt(15*time.Second))
	}
	for i := len(c.processes) - 1; i >= 0; i-- {
		errs = append(errs, c.processes[i].Stop(15*time.Second))
	}
	c.processes = nil
	prefixes := []string{c.Dir}
	for _, n := range c.nodes {
		prefixes = append(prefixes, n.runDir)
	}
	errs = append(errs, unmountUnder(prefixes...))
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
	for _, n := range c.nodes {
		errs = append(errs, removeCgroupRoot(n.cgroupRoot))
		_ = os.RemoveAll(n.runDir)
	}
	c.nodes = nil
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
