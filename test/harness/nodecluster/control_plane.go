package nodecluster

import (
	"net"
	"strconv"

	"github.com/indexed-batch-job/indexed-batch-job/test/harness/controlplane"
)

// Users of the control plane besides the admin and the kubelets
// (system:node:<node>, in system:nodes, as the Node authorizer wants): the
// components', each the user Kubernetes' bootstrap RBAC grants it.
const (
	controllerUser = "system:kube-controller-manager"
	schedulerUser  = "system:kube-scheduler"
	proxyUser      = "system:kube-proxy"
)

// nodeUser is node's kubelet's user.
func nodeUser(node string) string { return "system:node:" + node }

// controlPlaneOptions are the harness's control plane (etcd, kube-apiserver,
// kube-controller-manager with every default controller, kube-scheduler) in
// the control plane's namespace, the API server on its address, port 6443
// (the namespace is the cluster's own, so a fixed port is free).
func (c *Cluster) controlPlaneOptions() controlplane.Options {
	users := make([]controlplane.User, 0, 3+MaxNodes)
	users = append(users, controlplane.User{Name: controllerUser}, controlplane.User{Name: schedulerUser}, controlplane.User{Name: proxyUser})
	// A kubelet identity for every node the cluster may have, not only
	// those it starts with: kube-apiserver reads its static token file
	// once, and AddNode's kubelet needs one too. An identity no kubelet
	// uses can do nothing: the Node authorizer lets it write only its own
	// node.
	for i := range MaxNodes {
		users = append(users, controlplane.User{Name: nodeUser(nodeName(i)), Groups: []string{"system:nodes"}})
	}
	return controlplane.Options{
		BinDir:               c.bin,
		Dir:                  c.opts.Dir,
		Name:                 "ibj-node",
		Progress:             c.opts.Progress,
		Address:              c.net.cp,
		BindAddress:          net.IPv4zero,
		Port:                 6443,
		Prefix:               nsExec(c.net.name),
		ServiceCIDR:          c.net.svcs,
		ServiceAccountIssuer: "https://kubernetes.default.svc",
		Authorization:        "Node,RBAC",
		APIServerFlags:       c.apiServerFlags(),
		Users:                users,
		ControllerManager: &controlplane.Component{User: controllerUser, Flags: []string{
			// Each controller as its own service account, with the role
			// Kubernetes' bootstrap RBAC gives it (as kubeadm runs it).
			"--use-service-account-credentials=true",
			"--cluster-name=ibj-node",
			// The node lifecycle controller: how long a node may miss its
			// heartbeats before it is tainted unreachable (and its pods
			// then evicted by the taint eviction controller, once their
			// tolerationSeconds have passed).
			"--node-monitor-grace-period=" + c.opts.NodeMonitorGracePeriod.String(),
			"--node-monitor-period=" + c.opts.NodeMonitorPeriod.String(),
			"--terminated-pod-gc-threshold=" + strconv.Itoa(c.opts.TerminatedPodGCThreshold),
		}},
		Scheduler: &controlplane.Component{User: schedulerUser},
	}
}

// apiServerFlags are the flags kube-apiserver takes besides the control
// plane's own.
func (c *Cluster) apiServerFlags() []string {
	return []string{
		// The nodes' names resolve nowhere: reach the kubelets by address.
		"--kubelet-preferred-address-types=InternalIP",
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
