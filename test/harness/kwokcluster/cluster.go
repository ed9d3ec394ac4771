// Package kwokcluster starts a throwaway Kubernetes cluster on loopback for
// the demo and the end-to-end tests: etcd and kube-apiserver from the pinned
// control plane (bin/k8s/<version>), the IndexedBatchJob CRD, the admission
// webhook's configurations (calling the operator on this host through a
// forwarder, see webhook.go), fake nodes run
// by kwok, a minimal binder in place of kube-scheduler (or, with
// Options.KubeScheduler, the real one) and a reaper for the kubelet's final
// delete of a pod. There is no kube-controller-manager: the operator under
// test is the only controller.
//
// How pods end is scripted by their annotations, which kwok's stages in
// hack/kwok/stages/pods.yaml read: see that file.
package kwokcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/indexed-batch-job/indexed-batch-job/internal/workloadapi"
)

// K8sVersion is the version of the pinned control plane, as in the Makefile.
const K8sVersion = "v1.37.2"

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
	// ShutdownDurationAnnotation is how long a deleted pod keeps running
	// before its containers are killed (Go duration, default 0s).
	ShutdownDurationAnnotation = "kwok.indexedjob.dev/shutdown-duration"
	// Forever is the DurationAnnotation value of a pod that never ends by itself.
	Forever = "forever"
)

// Label of the fake nodes: their zone, zone-a, zone-b... in turn, so that a
// template's nodeSelector can pick some of them.
const ZoneLabel = "topology.kubernetes.io/zone"

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
	// ControlPlaneDir) in place of the minimal binder, so that resources,
	// affinity and gang scheduling are decided as in a real cluster.
	KubeScheduler bool
	// WorkloadAPI starts kube-apiserver, and kube-scheduler with
	// KubeScheduler, with the feature gate and API version of the Workload
	// API (workloadapi.APIServerFlags; Kubernetes 1.37 or later), so that
	// the scheduler places a PodGroup's pods all or none.
	WorkloadAPI bool
	// NodeAllocatable, when set, is every fake node's allocatable and
	// capacity (kwok keeps what a node was created with); unset, kwok
	// gives each node room for any pod.
	NodeAllocatable corev1.ResourceList
	// GarbageCollector runs kube-controller-manager with its garbage
	// collector alone, so that deleting an owner deletes what it owns, as on
	// a real cluster (MultiKueue's deletes rely on it). Its binary must be
	// built (hack/build-controlplane.sh kube-controller-manager).
	GarbageCollector bool
}

// Cluster is a running cluster.
type Cluster struct {
	// Kubeconfig is the path of an admin kubeconfig (user kwok-admin, in
	// group system:masters).
	Kubeconfig string
	// Config is the admin's client configuration.
	Config *rest.Config
	// Dir is Options.Dir.
	Dir string
	// NodeNames are the fake nodes, in order.
	NodeNames []string
	// WebhookPort is the port of the URL the webhook configurations call
	// (https://localhost:<port>): a forwarder that passes each connection to
	// the first of WebhookBackendPorts an operator listens on.
	WebhookPort int
	// WebhookBackendPorts are the ports operators serve the webhook on, one
	// per slot of WebhookArgs.
	WebhookBackendPorts []int

	// nodeAllocatable is Options.NodeAllocatable, for AddNode.
	nodeAllocatable corev1.ResourceList

	// ports are every port the cluster picked for itself or handed out
	// (FreePort): some are unbound at times (a restart, a killed operator),
	// when the kernel could offer them to the next listener on port 0.
	portsMu sync.Mutex
	ports   []int

	etcd, apiserver, kwok, scheduler *Process
	// controllerManager is kube-controller-manager, with
	// Options.GarbageCollector only.
	controllerManager *Process
	// etcdCmd and apiserverCmd are how etcd and kube-apiserver were
	// started, to start them again.
	etcdCmd, apiserverCmd []string
	certs                 *pki
	forwarder             *forwarder
	stopHelpers           context.CancelFunc
	stopSimulator         func()
	helpers               sync.WaitGroup
	helpersLog            *os.File
}

// ControlPlaneDir is where hack/build-controlplane.sh puts etcd,
// kube-apiserver and kubectl.
func ControlPlaneDir(root string) string {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		return dir
	}
	return filepath.Join(root, "bin", "k8s", K8sVersion)
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
	var missing []string
	bins := []string{
		filepath.Join(ControlPlaneDir(root), "etcd"),
		filepath.Join(ControlPlaneDir(root), "kube-apiserver"),
		filepath.Join(ControlPlaneDir(root), "kubectl"),
	}
	if kubelets == KwokKubelets {
		bins = append(bins, KwokBinary(root))
	}
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
	missing := MissingBinaries(opts.Root, opts.Kubelets)
	for bin, wanted := range map[string]bool{"kube-scheduler": opts.KubeScheduler, "kube-controller-manager": opts.GarbageCollector} {
		if path := filepath.Join(ControlPlaneDir(opts.Root), bin); wanted {
			if _, err := os.Stat(path); err != nil {
				missing = append(missing, path)
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kwokcluster: missing %v: run `make demo` or `make test-e2e` (hack/build-controlplane.sh kube-scheduler kube-controller-manager for those two), which build them", missing)
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 2
	}
	if opts.WebhookReplicas <= 0 {
		opts.WebhookReplicas = 1
	}
	progress := opts.Progress
	if progress == nil {
		progress = io.Discard
	}
	step := func(format string, args ...any) { _, _ = fmt.Fprintf(progress, "  "+format+"\n", args...) }
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{Dir: opts.Dir, Kubeconfig: filepath.Join(opts.Dir, "kubeconfig")}
	defer func() {
		if err != nil {
			_ = c.Stop()
			c = nil
		}
	}()

	bin := ControlPlaneDir(opts.Root)
	etcdPort, err := c.FreePort()
	if err != nil {
		return c, err
	}
	peerPort, err := c.FreePort()
	if err != nil {
		return c, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	step("starting etcd on %s", etcdURL)
	c.etcdCmd = []string{filepath.Join(bin, "etcd"),
		"--data-dir=" + filepath.Join(opts.Dir, "etcd"),
		"--listen-client-urls=" + etcdURL,
		"--advertise-client-urls=" + etcdURL,
		"--listen-peer-urls=http://127.0.0.1:" + strconv.Itoa(peerPort),
		"--initial-advertise-peer-urls=http://127.0.0.1:" + strconv.Itoa(peerPort),
		"--initial-cluster=default=http://127.0.0.1:" + strconv.Itoa(peerPort),
		"--unsafe-no-fsync=true",
	}
	c.etcd, err = StartProcess("etcd", c.etcdLog(), nil, c.etcdCmd[0], c.etcdCmd[1:]...)
	if err != nil {
		return c, err
	}

	certs, err := newPKI(filepath.Join(opts.Dir, "pki"))
	if err != nil {
		return c, err
	}
	apiPort, err := c.FreePort()
	if err != nil {
		return c, err
	}
	server := "https://127.0.0.1:" + strconv.Itoa(apiPort)
	step("starting kube-apiserver on %s", server)
	// The flags envtest uses, with a static token for the admin. Without
	// kube-controller-manager no namespace gets a default service account
	// and no node loses the not-ready taint that TaintNodesByCondition puts
	// on a new node, so both admission plugins are off.
	c.certs = certs
	c.apiserverCmd = []string{filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// No kube-proxy reads the kubernetes Service's endpoints here, and
		// since 1.37 the endpoint reconciler refuses a loopback address.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(apiPort),
		"--cert-dir=" + filepath.Join(opts.Dir, "pki"),
		"--tls-cert-file=" + certs.certFile,
		"--tls-private-key-file=" + certs.keyFile,
		"--token-auth-file=" + certs.tokenFile,
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--service-account-issuer=" + server,
		"--service-account-key-file=" + certs.saKeyFile,
		"--service-account-signing-key-file=" + certs.saKeyFile,
		"--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
		"--allow-privileged=true",
	}
	if opts.WorkloadAPI {
		for _, name := range slices.Sorted(maps.Keys(workloadapi.APIServerFlags)) {
			c.apiserverCmd = append(c.apiserverCmd, "--"+name+"="+workloadapi.APIServerFlags[name])
		}
	}
	c.apiserver, err = StartProcess("kube-apiserver", c.apiserverLog(), nil, c.apiserverCmd[0], c.apiserverCmd[1:]...)
	if err != nil {
		return c, err
	}
	c.Config = &rest.Config{
		Host:            server,
		BearerToken:     certs.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: certs.caCert},
		QPS:             100,
		Burst:           200,
	}
	if err := c.writeKubeconfig(certs); err != nil {
		return c, err
	}
	if err := c.waitReady(ctx); err != nil {
		return c, err
	}

	step("installing the IndexedBatchJob CRD")
	if _, err := envtest.InstallCRDs(c.Config, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(opts.Root, "config", "crd", "bases")},
		ErrorIfPathMissing: true,
	}); err != nil {
		return c, fmt.Errorf("installing CRDs: %w", err)
	}

	clientset, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return c, err
	}

	for range opts.WebhookReplicas {
		port, err := c.FreePort()
		if err != nil {
			return c, err
		}
		c.WebhookBackendPorts = append(c.WebhookBackendPorts, port)
	}
	if c.forwarder, err = startForwarder(c.WebhookBackendPorts); err != nil {
		return c, err
	}
	c.WebhookPort = c.forwarder.port()
	step("installing the admission webhook: https://localhost:%d, forwarded to the operator's port %v", c.WebhookPort, c.WebhookBackendPorts)
	if err := c.installWebhook(ctx, opts.Root, clientset); err != nil {
		return c, fmt.Errorf("installing the webhook: %w", err)
	}
	c.nodeAllocatable = opts.NodeAllocatable
	for range opts.Nodes {
		if _, err := c.createNode(ctx, clientset); err != nil {
			return c, err
		}
	}

	if opts.Kubelets == SimulatedKubelets {
		step("starting the pod simulator for %d fake nodes", opts.Nodes)
		if err := c.startSimulatedKubelets(ctx, clientset); err != nil {
			return c, err
		}
	} else {
		step("starting kwok %s with %d fake nodes", KwokVersion, opts.Nodes)
		if err := c.startKwok(ctx, opts, clientset); err != nil {
			return c, err
		}
	}

	if opts.GarbageCollector {
		step("starting kube-controller-manager's garbage collector")
		if err := c.startGarbageCollector(bin); err != nil {
			return c, err
		}
	}

	// What kube-scheduler and the kubelet would do that kwok does not, or
	// not safely: bind pending pods, remove finished deleted ones.
	helpersLog, err := os.OpenFile(filepath.Join(opts.Dir, "binder-reaper.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return c, err
	}
	logger := log.New(helpersLog, "", log.LstdFlags|log.Lmicroseconds)
	helpersCtx, stop := context.WithCancel(context.Background())
	c.stopHelpers = stop
	if opts.KubeScheduler {
		step("starting kube-scheduler")
		if err := c.startScheduler(opts); err != nil {
			return c, err
		}
	} else {
		c.helpers.Go(func() { runBinder(helpersCtx, clientset, logger) })
	}
	if opts.Kubelets == KwokKubelets {
		// The pod simulator makes its final deletes itself.
		c.helpers.Go(func() { runReaper(helpersCtx, clientset, logger) })
	}
	c.helpersLog = helpersLog
	step("cluster ready: KUBECONFIG=%s", c.Kubeconfig)
	return c, nil
}

func (c *Cluster) apiserverLog() string { return filepath.Join(c.Dir, "kube-apiserver.log") }

// RestartAPIServer stops kube-apiserver as a rollout of it would (SIGTERM,
// then SIGKILL after 15 s), starts it again with the same flags on the same
// port, and returns once it is ready. Clients see their connections drop and
// their watches end, and must recover by themselves.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	if err := c.StopAPIServer(); err != nil {
		return err
	}
	return c.StartAPIServer(ctx)
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 15 s)
// and leaves it stopped: every client's requests fail until
// StartAPIServer.
func (c *Cluster) StopAPIServer() error {
	return c.apiserver.Stop(15 * time.Second)
}

// StartAPIServer starts kube-apiserver again with the same flags on the
// same port and returns once it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	p, err := StartProcess("kube-apiserver", c.apiserverLog(), nil, c.apiserverCmd[0], c.apiserverCmd[1:]...)
	if err != nil {
		return err
	}
	c.apiserver = p
	return c.waitReady(ctx)
}

// RestartEtcd stops etcd (SIGTERM, then SIGKILL after 15 s) and starts it
// again on the same data directory, so nothing stored is lost, and returns
// once kube-apiserver is ready again.
func (c *Cluster) RestartEtcd(ctx context.Context) error {
	if err := c.etcd.Stop(15 * time.Second); err != nil {
		return err
	}
	p, err := StartProcess("etcd", c.etcdLog(), nil, c.etcdCmd[0], c.etcdCmd[1:]...)
	if err != nil {
		return err
	}
	c.etcd = p
	return c.waitReady(ctx)
}

// SetWebhookReachable cuts the webhook off from kube-apiserver (false), as
// a webhook Service without ready endpoints or a network policy would, and
// restores it (true). The operators behind it keep running.
func (c *Cluster) SetWebhookReachable(reachable bool) { c.forwarder.setDown(!reachable) }

func (c *Cluster) etcdLog() string { return filepath.Join(c.Dir, "etcd.log") }

// startKwok starts kwok for the fake nodes and waits until it has made
// them Ready.
func (c *Cluster) startKwok(ctx context.Context, opts Options, clientset kubernetes.Interface) (err error) {
	stages := filepath.Join(opts.Root, "hack", "kwok", "stages")
	c.kwok, err = StartProcess("kwok", filepath.Join(opts.Dir, "kwok.log"), nil, KwokBinary(opts.Root),
		"--kubeconfig="+c.Kubeconfig,
		"--config="+filepath.Join(stages, "nodes.yaml"),
		"--config="+filepath.Join(stages, "pods.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-lease-duration-seconds=40",
		"--cidr=10.244.0.0/16",
		"--node-ip=10.0.0.2",
		"--server-address=",
	)
	if err != nil {
		return err
	}
	return c.waitNodesReady(ctx, clientset)
}

// createNode creates the next fake node, kwok-node-<n>, for kwok to run.
func (c *Cluster) createNode(ctx context.Context, clientset kubernetes.Interface) (string, error) {
	i := len(c.NodeNames)
	name := fmt.Sprintf("kwok-node-%d", i)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: name,
		// kwok manages the nodes with this annotation and only them.
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
		Labels: map[string]string{
			"kubernetes.io/hostname": name,
			"kubernetes.io/os":       "linux",
			"kubernetes.io/arch":     "amd64",
			"type":                   "kwok",
			ZoneLabel:                "zone-" + string(rune('a'+i%26)),
		},
	}}
	if c.nodeAllocatable != nil {
		node.Status.Allocatable, node.Status.Capacity = c.nodeAllocatable.DeepCopy(), c.nodeAllocatable.DeepCopy()
	}
	if _, err := clientset.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("creating node %s: %w", name, err)
	}
	c.NodeNames = append(c.NodeNames, name)
	return name, nil
}

// AddNode adds a fake node like the cluster's others (kwok's kubelets
// only), and returns its name once kwok made it Ready: more room for the
// scheduler.
func (c *Cluster) AddNode(ctx context.Context) (string, error) {
	clientset, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return "", err
	}
	name, err := c.createNode(ctx, clientset)
	if err != nil {
		return "", err
	}
	return name, c.waitNodesReady(ctx, clientset)
}

// startScheduler starts the control plane's kube-scheduler as the admin.
func (c *Cluster) startScheduler(opts Options) (err error) {
	var args []string
	if opts.WorkloadAPI {
		args = append(args, "--feature-gates="+workloadapi.SchedulerFeatureGates)
	}
	c.scheduler, err = c.startComponent("kube-scheduler", ControlPlaneDir(opts.Root), args...)
	return err
}

// startGarbageCollector starts kube-controller-manager with the garbage
// collector as its only controller, as the cluster's admin.
func (c *Cluster) startGarbageCollector(bin string) (err error) {
	c.controllerManager, err = c.startComponent("kube-controller-manager", bin, "--controllers=garbagecollector")
	return err
}

// startComponent starts a control plane component of bin (kube-scheduler,
// kube-controller-manager) as the admin, without leader election, serving
// its health endpoints on a free loopback port, with extra flags; its log
// is <name>.log in the cluster's directory.
func (c *Cluster) startComponent(name, bin string, extra ...string) (*Process, error) {
	port, err := c.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--kubeconfig=" + c.Kubeconfig,
		"--authentication-kubeconfig=" + c.Kubeconfig,
		"--authorization-kubeconfig=" + c.Kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(c.Dir, name),
	}, extra...)
	return StartProcess(name, filepath.Join(c.Dir, name+".log"), nil, filepath.Join(bin, name), args...)
}

// Stop stops the binder (or kube-scheduler) and the reaper,
// kube-controller-manager, kwok,
// kube-apiserver and etcd, in that order.
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
	var errs []error
	for _, p := range []*Process{c.scheduler, c.controllerManager, c.kwok, c.apiserver, c.etcd} {
		if p != nil {
			errs = append(errs, p.Stop(15*time.Second))
		}
	}
	return errors.Join(errs...)
}

// Check returns an error if a component has exited.
func (c *Cluster) Check() error {
	for _, p := range []*Process{c.etcd, c.apiserver, c.kwok, c.scheduler, c.controllerManager} {
		if p == nil {
			continue
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v); see %s", p.Name, err, p.LogPath)
		}
	}
	return nil
}

func (c *Cluster) writeKubeconfig(certs *pki) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kwok"] = &clientcmdapi.Cluster{Server: c.Config.Host, CertificateAuthorityData: certs.caCert}
	cfg.AuthInfos["kwok-admin"] = &clientcmdapi.AuthInfo{Token: certs.adminToken}
	cfg.Contexts["kwok"] = &clientcmdapi.Context{Cluster: "kwok", AuthInfo: "kwok-admin", Namespace: "default"}
	cfg.CurrentContext = "kwok"
	return clientcmd.WriteToFile(*cfg, c.Kubeconfig)
}

// waitReady polls /readyz until the API server says it is ready.
func (c *Cluster) waitReady(ctx context.Context) error {
	certs := c.certs
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certs.caCert)
	httpClient := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if err := c.Check(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.Config.Host+"/readyz", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+certs.adminToken)
		if resp, err := httpClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after 90s; see %s", c.apiserver.LogPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// waitNodesReady waits until kwok has marked every fake node Ready.
func (c *Cluster) waitNodesReady(ctx context.Context, clientset kubernetes.Interface) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := c.Check(); err != nil {
			return err
		}
		list, err := clientset.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err == nil {
			ready := 0
			for i := range list.Items {
				if NodeReady(&list.Items[i]) {
					ready++
				}
			}
			if ready == len(c.NodeNames) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fake nodes not Ready after 60s; see %s", c.kwok.LogPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// FreePort is a free loopback port that is none of the ports the cluster
// picked or handed out before: a process started on it (an operator's
// probe, say) never takes the port of a webhook slot whose operator was
// just killed, nor kube-apiserver's while it restarts.
func (c *Cluster) FreePort() (int, error) {
	c.portsMu.Lock()
	defer c.portsMu.Unlock()
	for range 100 {
		port, err := FreePort()
		if err != nil {
			return 0, err
		}
		if !slices.Contains(c.ports, port) {
			c.ports = append(c.ports, port)
			return port, nil
		}
	}
	return 0, errors.New("no free loopback port that the cluster has not used")
}

// StartOperator starts the operator binary bin against the cluster as a
// deployment runs it (its admission webhook served on slot 0 of
// WebhookArgs), with extra flags, logging to manager.log in the cluster's
// directory, and returns once its readiness probe answers (within a
// minute). For a second cluster of a test; the e2e suite's own cluster
// starts its operators itself, several at once.
func (c *Cluster) StartOperator(ctx context.Context, bin string, extra ...string) (*Process, error) {
	probe, err := c.FreePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{
		"--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
	}, c.WebhookArgs(0, filepath.Join(c.Dir, "webhook-certs"))...)
	p, err := StartProcess("manager", filepath.Join(c.Dir, "manager.log"), []string{"KUBECONFIG=" + c.Kubeconfig}, bin, append(args, extra...)...)
	if err != nil {
		return nil, err
	}
	if err := p.WaitHealthy(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", probe), time.Minute); err != nil {
		return p, fmt.Errorf("the operator: %w; see %s", err, p.LogPath)
	}
	return p, nil
}
