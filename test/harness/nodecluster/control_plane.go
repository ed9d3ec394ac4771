package nodecluster

import (
	"context"
	"path/filepath"
	"strconv"
	"time"
)

// startControlPlane starts etcd, kube-apiserver, kube-controller-manager
// and kube-scheduler in the control plane's namespace, and returns once the
// API server is ready.
func (c *Cluster) startControlPlane(ctx context.Context) error {
	c.step("starting etcd")
	if err := c.startCP("etcd",
		"--data-dir="+filepath.Join(c.Dir, "etcd"),
		"--listen-client-urls=http://127.0.0.1:2379",
		"--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380",
		"--initial-advertise-peer-urls=http://127.0.0.1:2380",
		"--initial-cluster=default=http://127.0.0.1:2380",
		"--unsafe-no-fsync=true",
	); err != nil {
		return err
	}
	c.step("starting kube-apiserver on %s", c.Config.Host)
	if err := c.startCP("kube-apiserver", c.apiserverArgs()...); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "kube-apiserver to be ready", 90*time.Second, func() bool {
		body, err := c.clientset.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok"
	}); err != nil {
		return err
	}
	c.step("starting kube-controller-manager (node monitor grace period %s, pod GC over %d terminated pods) and kube-scheduler",
		c.opts.NodeMonitorGracePeriod, c.opts.TerminatedPodGCThreshold)
	if err := c.startCP("kube-controller-manager",
		"--kubeconfig="+c.kubeconfigs[controller],
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--service-account-private-key-file="+c.certs.saKeyFile,
		"--root-ca-file="+c.certs.caFile,
		// Each controller as its own service account, with the role
		// Kubernetes' bootstrap RBAC gives it (as kubeadm runs it).
		"--use-service-account-credentials=true",
		"--cluster-name=ibj-node",
		// The node lifecycle controller: how long a node may miss its
		// heartbeats before it is tainted unreachable (and its pods
		// then evicted by the taint eviction controller, once their
		// tolerationSeconds have passed).
		"--node-monitor-grace-period="+c.opts.NodeMonitorGracePeriod.String(),
		"--node-monitor-period="+c.opts.NodeMonitorPeriod.String(),
		"--terminated-pod-gc-threshold="+strconv.Itoa(c.opts.TerminatedPodGCThreshold),
	); err != nil {
		return err
	}
	return c.startCP("kube-scheduler",
		"--kubeconfig="+c.kubeconfigs[scheduler],
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	)
}

// apiserverArgs are kube-apiserver's flags.
func (c *Cluster) apiserverArgs() []string {
	return []string{
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=0.0.0.0",
		"--advertise-address=" + c.net.cp.String(),
		"--secure-port=" + strconv.Itoa(apiserverPort),
		"--cert-dir=" + c.certs.dir,
		"--tls-cert-file=" + c.certs.certFile,
		"--tls-private-key-file=" + c.certs.keyFile,
		"--client-ca-file=" + c.certs.caFile,
		"--token-auth-file=" + c.certs.tokenFile,
		"--kubelet-client-certificate=" + c.certs.kubeletClientCert,
		"--kubelet-client-key=" + c.certs.kubeletClientKey,
		// The nodes' names resolve nowhere: reach the kubelets by address.
		"--kubelet-preferred-address-types=InternalIP",
		"--authorization-mode=Node,RBAC",
		"--service-cluster-ip-range=" + c.net.svcs,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.certs.saKeyFile,
		"--service-account-signing-key-file=" + c.certs.saKeyFile,
		"--allow-privileged=true",
		// No kube-proxy runs beside the API server, in the control
		// plane's namespace: it calls webhooks (the operator's) at an
		// endpoint's pod address, routed to its node, rather than at
		// the Service's cluster IP.
		"--enable-aggregator-routing=true",
		// The tolerations every pod gets for the not-ready and
		// unreachable taints (the DefaultTolerationSeconds admission
		// plugin): how long its pods stay bound to a lost node.
		"--default-not-ready-toleration-seconds=" + strconv.Itoa(c.opts.NotReadyTolerationSeconds),
		"--default-unreachable-toleration-seconds=" + strconv.Itoa(c.opts.UnreachableTolerationSeconds),
	}
}

// startCP starts a control plane component, a binary of the pinned
// control plane, in the control plane's namespace.
func (c *Cluster) startCP(name string, args ...string) error {
	p, err := startIn(c.net.name, name, filepath.Join(c.Dir, name+".log"), filepath.Join(c.bin, name), args...)
	if err != nil {
		return err
	}
	c.processes = append(c.processes, p)
	return nil
}
