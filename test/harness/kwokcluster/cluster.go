// Package kwokcluster starts a throwaway Kubernetes cluster on loopback for
// the demo and the end-to-end tests: the harness's control plane
// (controlplane: etcd and kube-apiserver from bin/k8s/<version>, with
// kube-scheduler and kube-controller-manager's garbage collector when asked),
// the IndexedBatchJob CRD, the admission
// webhook's configurations (calling the operator on this host through a
// forwarder, see webhook.go), fake nodes run
// by kwok, a minimal binder in place of kube-scheduler (or, with
// Options.KubeScheduler, the real one) and a reaper for the kubelet's final
// delete of a pod. Unless Options.GarbageCollector asks for its garbage
// collector, there is no kube-controller-manager: the operator under test
// is the only controller.
//
// How pods end is scripted by their annotations, which kwok's stages in
// hack/kwok/stages/pods.yaml read: see that file. A faulty node
// (Options.FaultyNodes) fails every pod it starts, whatever they say: see
// hack/kwok/stages/node-fault.yaml.
package kwokcluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// K8sVersion is the version of the pinned control plane, as in the Makefile.
const K8sVersion = controlplane.K8sVersion

// KwokVersion is the kwok release the Makefile installs into bin/kwok-<version>.
const KwokVersion = "v0.8.0"

// Annotations on a pod template that script the fake kubelet; see
// hack/kwok/stages/pods.yaml.
const (
	// DurationAnnotation is how long the containers run (Go duration, default
	// 1s), or "forever".
	DurationAnnotation = "kwok.indexedjob.dev/duration"
	// FailIndexesAnnotation lists the completion indexes whose pods fail,
	// as an interval string such as "1,2" or "0,3-7".
	FailIndexesAnnotation = "kwok.indexedjob.dev/fail-indexes"
	// ExitCodeAnnotation is the exit code of failing pods (default 1).
	ExitCodeAnnotation = "kwok.indexedjob.dev/exit-code"
	// ExitReasonAnnotation is the reason failing pods' containers end with
	// (default Error); OOMKilled plays the kernel's OOM killer.
	ExitReasonAnnotation = "kwok.indexedjob.dev/exit-reason"
	// FailDurationAnnotation is how long failing pods run before they exit
	// (Go duration; default the DurationAnnotation).
	FailDurationAnnotation = "kwok.indexedjob.dev/fail-duration"
	// FailRestartAttemptsAnnotation narrows FailIndexesAnnotation to the
	// pods of these generations (their batch.indexedjob.dev/restart-attempt
	// label, 0 without one), as an interval string such as "0": a failing
	// index fails in them and succeeds in the others, after a RestartJob
	// rule restarted the job. Unset, it fails in every generation. Only the
	// pod simulator reads it; kwok's stages fail every generation.
	FailRestartAttemptsAnnotation = "kwok.indexedjob.dev/fail-restart-attempts"
	// ShutdownDurationAnnotation is how long a deleted pod keeps running
	// before its containers are killed (Go duration, default 0s).
	ShutdownDurationAnnotation = "kwok.indexedjob.dev/shutdown-duration"
	// Forever is the DurationAnnotation value of a pod that never ends by itself.
	Forever = "forever"
)

// Label of the fake nodes: their zone, zone-a, zone-b... in turn, so that a
// template's nodeSelector can pick some of them.
const ZoneLabel = "topology.kubernetes.io/zone"

// NodeFaultLabel marks a faulty node (Options.FaultyNodes), value
// NodeFaultExit1, for whoever looks at the nodes; the fault itself is the
// node's kwok, which loads hack/kwok/stages/node-fault.yaml.
const (
	NodeFaultLabel = "kwok.indexedjob.dev/node-fault"
	NodeFaultExit1 = "exit-1"
)

// Options says where the binaries and manifests are and where to put state.
type Options struct {
	// Root is the repository root. Required.
	Root string
	// Dir receives the kubeconfig, certificates, etcd data and one log file
	// per component. Required; created if missing.
	Dir string
	// Nodes is the number of fake nodes; default 2.
	Nodes int
	// Progress, if set, receives a line per step.
	Progress io.Writer
	// WebhookReplicas is how many operator processes can serve the
	// admission webhook at once (WebhookArgs' slots); default 1.
	WebhookReplicas int
	// Kubelets is what plays the nodes' kubelets: kwok (the default) or
	// the pod simulator in this process.
	Kubelets Kubelets
	// KubeScheduler runs the control plane's kube-scheduler (from
	// controlplane.BinDir) in place of the minimal binder, so that resources,
	// affinity and gang scheduling are decided as in a real cluster.
	KubeScheduler bool
	// WorkloadAPI starts kube-apiserver, and kube-scheduler with
	// KubeScheduler, with the feature gate and API version of the Workload
	// API (controlplane.Options.WorkloadAPI; Kubernetes 1.37 or later), so
	// that the scheduler places a PodGroup's pods all or none.
	WorkloadAPI bool
	// NodeAllocatable, when set, is every fake node's allocatable and
	// capacity (kwok keeps what a node was created with); unset, kwok
	// gives each node room for any pod.
	NodeAllocatable corev1.ResourceList
	// FaultyNodes is how many of the Nodes, the last ones, are faulty:
	// every container started there exits 1 a second after it started,
	// whatever its pod's annotations say, as on a node with a broken GPU.
	// Each is played by a kwok of its own (--manage-single-node) that
	// loads hack/kwok/stages/node-fault.yaml after the usual stages, so
	// the fault is the node's, not the pods'. kwok's kubelets only.
	FaultyNodes int
	// GarbageCollector runs kube-controller-manager with its garbage
	// collector alone, so that deleting an owner deletes what it owns, as on
	// a real cluster (MultiKueue's deletes rely on it). Its binary must be
	// built (hack/build-controlplane.sh kube-controller-manager).
	GarbageCollector bool
	// AdmissionPlugins are admission plugins kube-apiserver enables
	// besides its defaults (--enable-admission-plugins), such as
	// PodNodeSelector, which acts only in namespaces that ask for it.
	AdmissionPlugins []string
	// FeatureGates (Name=true, or several joined by commas) are every
	// control-plane component's --feature-gates
	// (controlplane.Options.FeatureGates): kube-apiserver's,
	// kube-scheduler's and kube-controller-manager's, also one started
	// later with StartComponent.
	FeatureGates []string
}

// Cluster is a running cluster: the control plane (its Kubeconfig, admin
// Config, Dir, restarts and FreePort), its fake nodes and the webhook's
// forwarder.
type Cluster struct {
	*controlplane.ControlPlane
	// NodeNames are the fake nodes, in order.
	NodeNames []string
	// FaultyNodeNames are the faulty ones among them (Options.FaultyNodes).
	FaultyNodeNames []string
	// WebhookPort is the port of the URL the webhook configurations call
	// (https://localhost:<port>): a forwarder that passes each connection to
	// the first of WebhookBackendPorts an operator listens on.
	WebhookPort int
	// WebhookBackendPorts are the ports operators serve the webhook on, one
	// per slot of WebhookArgs.
	WebhookBackendPorts []int

	// nodeAllocatable is Options.NodeAllocatable, for AddNode.
	nodeAllocatable corev1.ResourceList
	clientset       kubernetes.Interface
	forwarder       *forwarder
	stopHelpers     context.CancelFunc
	stopSimulator   func()
	helpers         sync.WaitGroup
	helpersLog      *os.File
}

// KwokBinary is where the Makefile installs kwok.
func KwokBinary(root string) string {
	if bin := os.Getenv("KWOK_BIN"); bin != "" {
		return bin
	}
	return filepath.Join(root, "bin", "kwok-"+KwokVersion, "kwok")
}

// MissingBinaries lists the binaries Start needs for these kubelets that
// are not built yet.
func MissingBinaries(root string, kubelets Kubelets) []string {
	return missingBinaries(root, Options{Kubelets: kubelets})
}

func missingBinaries(root string, opts Options) []string {
	bin := controlplane.BinDir(root)
	bins := []string{filepath.Join(bin, controlplane.Etcd), filepath.Join(bin, controlplane.APIServer), filepath.Join(bin, controlplane.Kubectl)}
	if opts.Kubelets == KwokKubelets {
		bins = append(bins, KwokBinary(root))
	}
	if opts.KubeScheduler {
		bins = append(bins, filepath.Join(bin, controlplane.Scheduler))
	}
	if opts.GarbageCollector {
		bins = append(bins, filepath.Join(bin, controlplane.ControllerManager))
	}
	var missing []string
	for _, bin := range bins {
		if _, err := os.Stat(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	return missing
}

// Start starts the cluster and returns once its nodes are Ready and the
// CRD is established. On error everything already started is stopped.
func Start(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Root == "" || opts.Dir == "" {
		return nil, errors.New("kwokcluster: Root and Dir are required")
	}
	if missing := missingBinaries(opts.Root, opts); len(missing) > 0 {
		return nil, fmt.Errorf("kwokcluster: missing %v: run `make demo` or `make test-e2e` (hack/build-controlplane.sh kube-scheduler kube-controller-manager for those two), which build them", missing)
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 2
	}
	if opts.WebhookReplicas <= 0 {
		opts.WebhookReplicas = 1
	}
	if opts.FaultyNodes < 0 || opts.FaultyNodes > opts.Nodes {
		return nil, fmt.Errorf("kwokcluster: FaultyNodes %d out of 0..Nodes (%d)", opts.FaultyNodes, opts.Nodes)
	}
	if opts.FaultyNodes > 0 && opts.Kubelets != KwokKubelets {
		return nil, errors.New("kwokcluster: FaultyNodes needs kwok's kubelets")
	}
	progress := cmp.Or[io.Writer](opts.Progress, io.Discard)
	step := func(format string, args ...any) { _, _ = fmt.Fprintf(progress, "  "+format+"\n", args...) }
	c = &Cluster{nodeAllocatable: opts.NodeAllocatable}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()
	if c.ControlPlane, err = controlplane.Start(ctx, controlPlaneOptions(opts, progress)); err != nil {
		return c, err
	}
	if c.clientset, err = c.Clientset(); err != nil {
		return c, err
	}
	if err := c.startWebhook(ctx, opts); err != nil {
		return c, err
	}
	step("installing the admission webhook: https://localhost:%d, forwarded to the operator's port %v", c.WebhookPort, c.WebhookBackendPorts)
	for i := range opts.Nodes {
		if _, err := c.createNode(ctx, i >= opts.Nodes-opts.FaultyNodes); err != nil {
			return c, err
		}
	}
	if opts.Kubelets == SimulatedKubelets {
		step("starting the pod simulator for %d fake nodes", opts.Nodes)
		err = c.startSimulatedKubelets(ctx)
	} else {
		step("starting kwok %s with %d fake nodes (faulty: %v)", KwokVersion, opts.Nodes, c.FaultyNodeNames)
		err = c.startKwok(ctx, opts)
	}
	if err != nil {
		return c, err
	}
	if err := c.startHelpers(opts); err != nil {
		return c, err
	}
	step("cluster ready: KUBECONFIG=%s", c.Kubeconfig)
	return c, nil
}

// controlPlaneOptions is the control plane of a kwok cluster: on loopback,
// the IndexedBatchJob CRD, kube-scheduler and kube-controller-manager's
// garbage collector as asked. Without kube-controller-manager's other
// controllers no namespace gets a default service account and no node
// loses the not-ready taint that TaintNodesByCondition puts on a new node,
// so both admission plugins are off.
func controlPlaneOptions(opts Options, progress io.Writer) controlplane.Options {
	cpo := controlplane.Options{
		BinDir:         controlplane.BinDir(opts.Root),
		Dir:            opts.Dir,
		Name:           "kwok",
		Progress:       progress,
		APIServerFlags: []string{"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition"},
		WorkloadAPI:    opts.WorkloadAPI,
		FeatureGates:   opts.FeatureGates,
		CRDPaths:       []string{filepath.Join(opts.Root, "config", "crd", "bases")},
	}
	if len(opts.AdmissionPlugins) > 0 {
		cpo.APIServerFlags = append(cpo.APIServerFlags, "--enable-admission-plugins="+strings.Join(opts.AdmissionPlugins, ","))
	}
	if opts.KubeScheduler {
		cpo.Scheduler = &controlplane.Component{}
	}
	if opts.GarbageCollector {
		cpo.ControllerManager = &controlplane.Component{Flags: []string{"--controllers=garbagecollector"}}
	}
	return cpo
}

// startWebhook picks the operators' webhook ports, starts the forwarder in
// front of them and installs the webhook's configurations calling it.
func (c *Cluster) startWebhook(ctx context.Context, opts Options) error {
	for range opts.WebhookReplicas {
		port, err := c.FreePort()
		if err != nil {
			return err
		}
		c.WebhookBackendPorts = append(c.WebhookBackendPorts, port)
	}
	var err error
	if c.forwarder, err = startForwarder(c.WebhookBackendPorts); err != nil {
		return err
	}
	c.WebhookPort = c.forwarder.port()
	if err := c.installWebhook(ctx, opts.Root); err != nil {
		return fmt.Errorf("installing the webhook: %w", err)
	}
	return nil
}

// startHelpers starts what kube-scheduler and the kubelet would do that
// kwok does not, or not safely: bind pending pods (or kube-scheduler does,
// with Options.KubeScheduler), remove finished deleted ones (the pod
// simulator makes its final deletes itself).
func (c *Cluster) startHelpers(opts Options) error {
	helpersLog, err := os.OpenFile(filepath.Join(opts.Dir, "binder-reaper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.helpersLog = helpersLog
	logger := log.New(helpersLog, "", log.LstdFlags|log.Lmicroseconds)
	helpersCtx, stop := context.WithCancel(context.Background())
	c.stopHelpers = stop
	if !opts.KubeScheduler {
		c.helpers.Go(func() { runBinder(helpersCtx, c.clientset, logger) })
	}
	if opts.Kubelets == KwokKubelets {
		c.helpers.Go(func() { runReaper(helpersCtx, c.clientset, logger) })
	}
	return nil
}

// SetWebhookReachable cuts the webhook off from kube-apiserver (false), as
// a webhook Service without ready endpoints or a network policy would, and
// restores it (true). The operators behind it keep running.
func (c *Cluster) SetWebhookReachable(reachable bool) { c.forwarder.setDown(!reachable) }

// Values of kwok's node annotation kwok.x-k8s.io/node: the cluster's
// kwok manages the nodes annotated fake; each faulty node, annotated
// faulty, has a kwok of its own.
const (
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	kwokNodeFake       = "fake"
	kwokNodeFaulty     = "faulty"
)

// startKwok starts kwok for the fake nodes, and one more for each faulty
// node, and waits until they have made them Ready.
func (c *Cluster) startKwok(ctx context.Context, opts Options) error {
	stages := filepath.Join(opts.Root, "hack", "kwok", "stages")
	args := func(configs []string, manage ...string) []string {
		a := []string{"--kubeconfig=" + c.Kubeconfig}
		for _, f := range configs {
			a = append(a, "--config="+filepath.Join(stages, f))
		}
		return append(append(a, "--manage-all-nodes=false"), append(manage,
			"--node-lease-duration-seconds=40",
			"--cidr=10.244.0.0/16",
			"--node-ip=10.0.0.2",
			"--server-address=",
		)...)
	}
	usual := []string{"nodes.yaml", "pods.yaml"}
	if _, err := c.Run("kwok", KwokBinary(opts.Root),
		args(usual, "--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"="+kwokNodeFake)...); err != nil {
		return err
	}
	// One kwok per faulty node: --manage-single-node watches only that
	// node's pods, where a second kwok keyed on an annotation would decode
	// every bound pod of the cluster.
	for _, name := range c.FaultyNodeNames {
		if _, err := c.Run("kwok-faulty-"+strings.TrimPrefix(name, "kwok-"), KwokBinary(opts.Root),
			args(append(usual, "node-fault.yaml"), "--manage-single-node="+name)...); err != nil {
			return err
		}
	}
	return c.waitNodesReady(ctx)
}

// createNode creates the next fake node, kwok-node-<n>, for kwok to run,
// or for a kwok of its own to run with the node's fault (faulty).
func (c *Cluster) createNode(ctx context.Context, faulty bool) (string, error) {
	i := len(c.NodeNames)
	name := fmt.Sprintf("kwok-node-%d", i)
	managedBy := kwokNodeFake
	if faulty {
		managedBy = kwokNodeFaulty
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		// The cluster's kwok manages the nodes annotated fake, and only them.
		Annotations: map[string]string{kwokNodeAnnotation: managedBy, "node.alpha.kubernetes.io/ttl": "0"},
		Labels: map[string]string{
			"kubernetes.io/hostname": name,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
			"type":                   "kwok",
			ZoneLabel:                "zone-" + string(rune('a'+i%26)),
		},
	}}
	if faulty {
		node.Labels[NodeFaultLabel] = NodeFaultExit1
	}
	if c.nodeAllocatable != nil {
		node.Status.Allocatable, node.Status.Capacity = c.nodeAllocatable.DeepCopy(), c.nodeAllocatable.DeepCopy()
	}
	if _, err := c.clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating node %s: %w", name, err)
	}
	c.NodeNames = append(c.NodeNames, name)
	if faulty {
		c.FaultyNodeNames = append(c.FaultyNodeNames, name)
	}
	return name, nil
}

// AddNode adds a fake node like the cluster's others (kwok's kubelets
// only), and returns its name once kwok made it Ready: more room for the
// scheduler.
func (c *Cluster) AddNode(ctx context.Context) (string, error) {
	name, err := c.createNode(ctx, false)
	if err != nil {
		return "", err
	}
	return name, c.waitNodesReady(ctx)
}

// Stop stops the binder and the reaper, the pod simulator, the webhook's
// forwarder, then kwok, the components and the control plane.
func (c *Cluster) Stop() error {
	if c.stopHelpers != nil {
		c.stopHelpers()
		c.helpers.Wait()
		_ = c.helpersLog.Close()
		c.stopHelpers = nil
	}
	if c.stopSimulator != nil {
		c.stopSimulator()
		c.stopSimulator = nil
	}
	if c.forwarder != nil {
		c.forwarder.stop()
		c.forwarder = nil
	}
	return c.ControlPlane.Stop()
}

// waitNodesReady waits until every fake node is Ready.
func (c *Cluster) waitNodesReady(ctx context.Context) error {
	return c.WaitFor(ctx, "the fake nodes to be Ready", 60*time.Second, func() bool {
		list, err := c.clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		ready := 0
		for i := range list.Items {
			if NodeReady(&list.Items[i]) {
				ready++
			}
		}
		return ready == len(c.NodeNames)
	})
}

// StartOperator starts the operator binary bin against the cluster as a
// deployment runs it (its admission webhook served on slot 0 of
// WebhookArgs), with extra flags, logging to manager.log in the cluster's
// directory, and returns once its readiness probe answers (within a
// minute). For a second cluster of a test; the e2e suite's own cluster
// starts its operators itself, several at once.
func (c *Cluster) StartOperator(ctx context.Context, bin string, extra ...string) (*controlplane.Process, error) {
	probe, err := c.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
	}, c.WebhookArgs(0, filepath.Join(c.Dir, "webhook-certs"))...)
	p, err := controlplane.StartProcess("manager", filepath.Join(c.Dir, "manager.log"), []string{"KUBECONFIG=" + c.Kubeconfig}, bin, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitHealthy(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", probe), time.Minute); err != nil {
		return p, fmt.Errorf("the operator: %w; see %s", err, p.LogPath)
	}
	return p, nil
}
