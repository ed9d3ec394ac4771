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
// The control plane is the harness's one launcher (controlplane), its
// PKI and kubeconfigs included; the nodes' processes run beside it
// (ControlPlane.RunIn), so that Check and Stop cover them.
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

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

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
	// FaultyRuntime is the faulty-runc binary a broken node's containerd
	// runs as its runc (BreakNode); default Root/bin/faulty-runc, where
	// make node-binaries builds test/harness/cmd/faulty-runc. Only
	// BreakNode needs it.
	FaultyRuntime string
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
	if o.FaultyRuntime == "" {
		o.FaultyRuntime = filepath.Join(o.Root, "bin", "faulty-runc")
	}
}

// Cluster is a running cluster: the control plane (its admin Kubeconfig
// and Config, Dir, Check) and the nodes.
type Cluster struct {
	*controlplane.ControlPlane
	// APIServerIP is the control plane's address, where this host reaches
	// the API server.
	APIServerIP net.IP
	// Nodes are the nodes' names: ibj-node-0 to ibj-node-<Nodes-1>.
	Nodes []string

	opts      Options
	bin       string // Kubernetes' binaries
	net       *network
	clientset kubernetes.Interface
	// proxyKubeconfig is kube-proxy's, shared by the nodes.
	proxyKubeconfig string
	nodes           []*node
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
	bin := controlplane.BinDir(root)
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
	c = &Cluster{opts: opts, bin: controlplane.BinDir(opts.Root)}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	c.netnsBefore = netnsNames()
	if err := c.setUp(ctx); err != nil {
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
	if err := c.WaitFor(ctx, "the default service account", 60*time.Second, func() bool {
		_, err := c.clientset.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil
	}); err != nil {
		return c, err
	}
	c.step("cluster ready: KUBECONFIG=%s", c.Kubeconfig)
	return c, nil
}

// nodeName is node i's name.
func nodeName(i int) string { return fmt.Sprintf("ibj-node-%d", i) }

// step reports a step of Start to Options.Progress.
func (c *Cluster) step(format string, args ...any) {
	if c.opts.Progress != nil {
		_, _ = fmt.Fprintf(c.opts.Progress, "  "+format+"\n", args...)
	}
}

// setUp creates the network namespaces, starts the control plane in its
// own, and makes each node's directories, kubeconfigs and configuration.
func (c *Cluster) setUp(ctx context.Context) error {
	c.step("creating the network namespaces of %d nodes", c.opts.Nodes)
	var err error
	if c.net, err = newNetwork(c.opts.Nodes); err != nil {
		return err
	}
	c.APIServerIP = c.net.cp
	c.step("network namespace %s: the control plane at %s, services %s", c.net.name, c.net.cp, c.net.svcs)
	for i, n := range c.net.nodes {
		c.Nodes = append(c.Nodes, nodeName(i))
		c.step("network namespace %s: node %s at %s, pods %s", n.name, c.Nodes[i], n.ip, n.pods)
	}
	c.step("starting the control plane (node monitor grace period %s, pod GC over %d terminated pods)",
		c.opts.NodeMonitorGracePeriod, c.opts.TerminatedPodGCThreshold)
	if c.ControlPlane, err = controlplane.Start(ctx, c.controlPlaneOptions()); err != nil {
		return err
	}
	c.Config.QPS, c.Config.Burst = 50, 100
	if c.clientset, err = kubernetes.NewForConfig(c.Config); err != nil {
		return err
	}
	c.proxyKubeconfig = filepath.Join(c.Dir, "kube-proxy.kubeconfig")
	if err := c.WriteKubeconfig(c.proxyKubeconfig, proxyUser); err != nil {
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

// Stop stops every component and removes what they left on this host:
// the containers, their mounts and cgroups, the network namespaces. Dir is
// kept, for its logs.
func (c *Cluster) Stop() error {
	var errs []error
	// The kubelets first, so that nothing restarts the containers killed
	// next; then the rest of the nodes' processes and the control plane.
	for _, n := range c.nodes {
		errs = append(errs, c.stopProcess(&n.kubelet, 10*time.Second))
		if n.containerd != nil {
			killContainers(n.socket)
		}
	}
	errs = append(errs, c.ControlPlane.Stop())
	prefixes := make([]string, 0, 2*len(c.nodes))
	for _, n := range c.nodes {
		n.proxy, n.containerd = nil, nil
		// The containers before their shims, which reap them.
		errs = append(errs, killCgroup(n.cgroupRoot))
		killShims(n.socket)
		prefixes = append(prefixes, n.dir, n.runDir)
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
