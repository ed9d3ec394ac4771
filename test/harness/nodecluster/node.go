package nodecluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
	"github.com/indexed-batch-job/indexed-batch-job/test/harness/kwokcluster"
)

// node is one node of the cluster: a kubelet, a containerd and a
// kube-proxy in a network namespace and a cgroup parent of their own, with
// their state and logs in a directory of its own.
type node struct {
	name       string
	net        nodeNet
	dir        string // Cluster.Dir/<name>: state, configuration, logs
	runDir     string // /run/<namespace>: sockets (a unix socket's path is short)
	socket     string // containerd's
	cgroupRoot string // the kubelet's cgroupRoot, in every hierarchy
	kubeconfig string // the kubelet's
	// faulty makes its containerd run faulty-runc (BreakNode).
	faulty bool
	// The components running now, which the control plane watches; nil
	// once stopped.
	containerd, kubelet, proxy *controlplane.Process
}

// run starts one of the node's components in its namespace, beside the
// control plane, which watches it until stopProcess; its log is
// <component>.log in the node's directory, one file across its restarts.
func (c *Cluster) run(n *node, component, path string, args ...string) (*controlplane.Process, error) {
	return c.RunIn(nsExec(n.net.name), n.name+"/"+component, path, args...)
}

// stopProcess stops a component of a node (SIGTERM, then SIGKILL after
// grace; at once if grace is 0) once the control plane no longer watches
// it, and clears it.
func (c *Cluster) stopProcess(p **controlplane.Process, grace time.Duration) error {
	if *p == nil {
		return nil
	}
	c.Forget(*p)
	var err error
	if grace == 0 {
		err = (*p).Kill()
	} else {
		err = (*p).Stop(grace)
	}
	*p = nil
	return err
}

// newNode makes node i's directories, cgroup root and configuration.
func (c *Cluster) newNode(i int) (*node, error) {
	nn := c.net.nodes[i]
	n := &node{name: c.Nodes[i], net: nn, dir: filepath.Join(c.Dir, c.Nodes[i]),
		runDir: filepath.Join("/run", nn.name), cgroupRoot: "/" + nn.name}
	n.socket = filepath.Join(n.runDir, "containerd.sock")
	n.kubeconfig = filepath.Join(n.dir, "kubeconfig")
	cniConf := filepath.Join(n.dir, "cni", "net.d")
	for _, dir := range []string{n.runDir, cniConf} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return n, err
		}
	}
	if err := c.WriteKubeconfig(n.kubeconfig, nodeUser(n.name)); err != nil {
		return n, err
	}
	if err := makeCgroupRoot(n.cgroupRoot); err != nil {
		return n, fmt.Errorf("cgroup root of %s: %w", n.name, err)
	}
	files := map[string]string{
		filepath.Join(cniConf, "10-ibj.conflist"): cniConfig("ibj-"+n.name, nn.pods, filepath.Join(n.dir, "cni", "ipam")),
		filepath.Join(n.dir, "kubelet.yaml"):      c.kubeletConfig(n),
	}
	for path, data := range files {
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			return n, err
		}
	}
	return n, c.writeContainerdConfig(n)
}

// writeContainerdConfig writes the node's containerd.toml, with
// faulty-runc as its runc when the node is faulty.
func (c *Cluster) writeContainerdConfig(n *node) error {
	runc := ""
	if n.faulty {
		runc = c.opts.FaultyRuntime
	}
	config := containerdConfig(filepath.Join(n.dir, "containerd"), filepath.Join(n.runDir, "containerd"), n.socket,
		filepath.Join(n.runDir, "runc"), runc, filepath.Join(n.dir, "cni", "net.d"))
	return os.WriteFile(filepath.Join(n.dir, "containerd.toml"), []byte(config), 0o644)
}

// bootNode starts node i's containerd (importing the images the first
// time), kube-proxy and kubelet.
func (c *Cluster) bootNode(i int, withImages bool) error {
	n := c.nodes[i]
	if err := c.startContainerd(n); err != nil {
		return err
	}
	if withImages {
		if err := importImages(n.socket, c.opts.ImagesDir); err != nil {
			return fmt.Errorf("%s: %w", n.name, err)
		}
	}
	p, err := c.run(n, "kube-proxy", filepath.Join(c.bin, "kube-proxy"),
		"--kubeconfig="+c.proxyKubeconfig,
		"--proxy-mode=iptables",
		"--cluster-cidr="+c.net.clusterPods,
		"--hostname-override="+n.name,
		// Conntrack's limits and timeouts are the kernel's, shared by
		// every namespace: leave them as this host has them.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:10249",
		"--healthz-bind-address=127.0.0.1:10256",
	)
	if err != nil {
		return err
	}
	n.proxy = p
	return c.startKubelet(n)
}

func (c *Cluster) startContainerd(n *node) error {
	p, err := c.run(n, "containerd", "containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
	if err != nil {
		return err
	}
	n.containerd = p
	// The kubelet needs the CRI plugin, which answers after containerd's
	// own API does.
	return c.WaitFor(context.Background(), n.name+"'s containerd", 30*time.Second, func() bool {
		return criReady(n.socket)
	})
}

func (c *Cluster) startKubelet(n *node) error {
	p, err := c.run(n, "kubelet", filepath.Join(c.bin, "kubelet"),
		"--config="+filepath.Join(n.dir, "kubelet.yaml"),
		"--kubeconfig="+n.kubeconfig,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--hostname-override="+n.name,
		"--node-ip="+n.net.ip.String(),
		"--v=2",
	)
	if err != nil {
		return err
	}
	n.kubelet = p
	return nil
}

// kubeletConfig is a node's kubelet configuration: cgroupfs on this host's
// cgroup v1 under the node's own cgroup root, authentication of the API
// server by the cluster's CA and of everyone else by token review, the
// pods' logs in the node's directory (the kubelet removes the log
// directories of pods it does not know, in a directory the kubelets of
// this host would otherwise share), a lease renewed every eighth of the
// node monitor grace period, no eviction for a busy disk, and no image
// garbage collection (an image removed here cannot be pulled again).
func (c *Cluster) kubeletConfig(n *node) string {
	lease := int(c.opts.NodeMonitorGracePeriod.Seconds() / 2)
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix://%s
podLogsDir: %s
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
nodeLeaseDurationSeconds: %d
`, n.cgroupRoot, n.socket, filepath.Join(n.dir, "pod-logs"), n.net.ip, c.PKI.CAFile, max(lease, 4))
}

// StopNode loses node i as a machine that lost its power: its kubelet,
// kube-proxy and containerd are killed (SIGKILL), then every process in
// the node's cgroup (its containers and pod sandboxes) and containerd's
// shims. Nothing is written to the API server: the pods stay bound to
// the node, Running, until the node lifecycle controller notices the
// missing heartbeats (Options.NodeMonitorGracePeriod) and taints the node
// unreachable. Its state stays on disk (as on a machine's disk); StartNode
// boots it again.
func (c *Cluster) StopNode(i int) error {
	n := c.nodes[i]
	for _, p := range []**controlplane.Process{&n.kubelet, &n.proxy, &n.containerd} {
		if err := c.stopProcess(p, 0); err != nil {
			return err
		}
	}
	// The containers before their shims, which reap them.
	err := killCgroup(n.cgroupRoot)
	killShims(n.socket)
	return err
}

// StartNode boots node i again after StopNode, as a machine that comes
// back: containerd (which finds its containers dead), kube-proxy and the
// kubelet, which cleans up what the API server no longer has and reports
// the rest. It returns once the node is Ready and the node lifecycle
// controller has lifted its not-ready and unreachable taints.
func (c *Cluster) StartNode(ctx context.Context, i int) error {
	if c.nodes[i].kubelet != nil || c.nodes[i].containerd != nil {
		return fmt.Errorf("node %s is running", c.Nodes[i])
	}
	if err := c.bootNode(i, false); err != nil {
		return err
	}
	return c.WaitNodeReady(ctx, i, 2*time.Minute)
}

// WaitNodeReady waits until node i is Ready with no not-ready or
// unreachable taint.
func (c *Cluster) WaitNodeReady(ctx context.Context, i int, timeout time.Duration) error {
	return c.WaitFor(ctx, c.Nodes[i]+" to be Ready", timeout, func() bool {
		node, err := c.clientset.CoreV1().Nodes().Get(ctx, c.Nodes[i], metav1.GetOptions{})
		return err == nil && kwokcluster.NodeReady(node) && !notReadyTainted(node)
	})
}

// notReadyTainted reports whether the node still has the taints of a node
// not ready or unreachable: the node lifecycle controller lifts them once
// the node is Ready.
func notReadyTainted(node *corev1.Node) bool {
	for _, t := range node.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return true
		}
	}
	return false
}

// StopKubelet stops node i's kubelet as a service manager does (SIGTERM):
// its containers run on.
func (c *Cluster) StopKubelet(i int) error {
	n := c.nodes[i]
	if n.kubelet == nil {
		return fmt.Errorf("%s's kubelet is not running", n.name)
	}
	return c.stopProcess(&n.kubelet, 10*time.Second)
}

// StartKubelet starts node i's kubelet again, with its state.
func (c *Cluster) StartKubelet(i int) error {
	if c.nodes[i].kubelet != nil {
		return fmt.Errorf("%s's kubelet is running", c.Nodes[i])
	}
	return c.startKubelet(c.nodes[i])
}

// StopContainerd stops node i's containerd as a service manager does
// (SIGTERM): its shims, and so its containers, run on.
func (c *Cluster) StopContainerd(i int) error {
	n := c.nodes[i]
	if n.containerd == nil {
		return fmt.Errorf("%s's containerd is not running", n.name)
	}
	return c.stopProcess(&n.containerd, 10*time.Second)
}

// StartContainerd starts node i's containerd again, with its state, and
// returns once it answers.
func (c *Cluster) StartContainerd(i int) error {
	if c.nodes[i].containerd != nil {
		return fmt.Errorf("%s's containerd is running", c.Nodes[i])
	}
	return c.startContainerd(c.nodes[i])
}

// RestartKubelet stops node i's kubelet, waits down, and starts it again.
func (c *Cluster) RestartKubelet(ctx context.Context, i int, down time.Duration) error {
	if err := c.StopKubelet(i); err != nil {
		return err
	}
	if err := sleep(ctx, down); err != nil {
		return err
	}
	return c.StartKubelet(i)
}

// RestartContainerd stops node i's containerd, waits down, and starts it
// again.
func (c *Cluster) RestartContainerd(ctx context.Context, i int, down time.Duration) error {
	if err := c.StopContainerd(i); err != nil {
		return err
	}
	if err := sleep(ctx, down); err != nil {
		return err
	}
	return c.StartContainerd(i)
}

// OutOfServiceTaint is what TaintOutOfService puts on a node: an
// administrator's word that the node is down for good, on which pod GC
// fails and deletes the pods terminating there (once the node is not
// Ready) and the taint eviction controller deletes the others.
var OutOfServiceTaint = corev1.Taint{Key: corev1.TaintNodeOutOfService, Value: "nodeshutdown", Effect: corev1.TaintEffectNoExecute}

// TaintOutOfService taints node i node.kubernetes.io/out-of-service:NoExecute.
func (c *Cluster) TaintOutOfService(ctx context.Context, i int) error {
	return c.updateTaints(ctx, i, func(taints []corev1.Taint) []corev1.Taint {
		return append(taints, OutOfServiceTaint)
	})
}

// UntaintOutOfService removes TaintOutOfService's taint from node i.
func (c *Cluster) UntaintOutOfService(ctx context.Context, i int) error {
	return c.updateTaints(ctx, i, func(taints []corev1.Taint) []corev1.Taint {
		var kept []corev1.Taint
		for _, t := range taints {
			if t.Key != corev1.TaintNodeOutOfService {
				kept = append(kept, t)
			}
		}
		return kept
	})
}

// updateTaints rewrites node i's taints, again on a conflict (the node
// lifecycle controller writes them too).
func (c *Cluster) updateTaints(ctx context.Context, i int, change func([]corev1.Taint) []corev1.Taint) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node, err := c.clientset.CoreV1().Nodes().Get(ctx, c.Nodes[i], metav1.GetOptions{})
		if err != nil {
			return err
		}
		node.Spec.Taints = change(node.Spec.Taints)
		_, err = c.clientset.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
		return err
	})
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
