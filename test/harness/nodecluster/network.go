package nodecluster

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// network is the cluster's network namespaces and their addresses. The
// control plane runs in a namespace of its own, whose bridge ibjbr is the
// cluster's one L2 segment; each node runs in a namespace of its own too
// (nsenter --net), with its kubelet, containerd, its pods' bridge and its
// kube-proxy's iptables rules, and is plugged into that bridge by a veth
// pair, as kind's nodes are plugged into one docker network. A veth pair
// joins this host to the bridge as well. Pod-to-pod traffic between nodes
// is routed, by routes to each node's pod range through its address, in
// every node's namespace and in the control plane's (which reaches the
// operator's webhook at its pod's address: --enable-aggregator-routing).
// Everything is gone with the namespaces.
//
// Slot s picks the namespaces' names, ibj-node-s-cp for the control plane
// and ibj-node-s-i for node i, and the addresses, from ranges reserved for network tests
// (RFC 2544):
//
//	198.19.s.1          this host's end of its veth pair
//	198.19.s.2          the control plane (the bridge's address): the API server
//	198.19.s.(10+i)     node i: its kubelet's address
//	198.18.(8s+i).0/24  node i's pods, on its bridge ibj0 (.1 the gateway)
//	198.18.(128+s).0/24 the Services' cluster IPs
type network struct {
	slot   int
	name   string // the control plane's namespace, under /run/netns
	hostIf string // this host's end of its veth pair
	host   net.IP
	cp     net.IP
	nodes  []nodeNet
	// clusterPods is the CIDR holding every node's pod range.
	clusterPods string
	svcs        string // CIDR
	// kubernetesIP is the kubernetes Service's cluster IP: the first of
	// svcs.
	kubernetesIP net.IP
}

// nodeNet is one node's namespace and addresses.
type nodeNet struct {
	name string // the namespace
	ip   net.IP
	pods string // CIDR
}

const (
	maxSlots = 16
	// MaxNodes is the most nodes a cluster can have: node i's pods are
	// on 198.18.(8s+i).0/24.
	MaxNodes = 8
)

// newNetwork creates the namespaces of the first free slot for nodes
// nodes, and the veth pairs between them.
func newNetwork(nodes int) (*network, error) {
	if nodes < 1 || nodes > MaxNodes {
		return nil, fmt.Errorf("nodecluster: %d nodes: from 1 to %d", nodes, MaxNodes)
	}
	for slot := range maxSlots {
		name := fmt.Sprintf("ibj-node-%d-cp", slot)
		if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
			continue
		}
		n := &network{
			slot:         slot,
			name:         name,
			hostIf:       fmt.Sprintf("ibjh%d", slot),
			host:         net.IPv4(198, 19, byte(slot), 1),
			cp:           net.IPv4(198, 19, byte(slot), 2),
			clusterPods:  fmt.Sprintf("198.18.%d.0/21", 8*slot),
			svcs:         fmt.Sprintf("198.18.%d.0/24", 128+slot),
			kubernetesIP: net.IPv4(198, 18, byte(128+slot), 1),
		}
		for i := range nodes {
			n.nodes = append(n.nodes, n.nodeNet(i))
		}
		if err := n.create(); err != nil {
			_ = n.delete()
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("no free network slot: /run/netns/ibj-node-0-cp to -%d-cp all exist (ip netns del the ones no cluster runs in)", maxSlots-1)
}

// nodeNet is node i's namespace and addresses.
func (n *network) nodeNet(i int) nodeNet {
	return nodeNet{
		name: fmt.Sprintf("ibj-node-%d-%d", n.slot, i),
		ip:   net.IPv4(198, 19, byte(n.slot), byte(10+i)),
		pods: fmt.Sprintf("198.18.%d.0/24", 8*n.slot+i),
	}
}

// create makes the control plane's namespace with its bridge, joins this
// host to it, then each node.
func (n *network) create() error {
	steps := make([][]string, 0, 10+len(n.nodes)*(11+len(n.nodes)))
	steps = append(steps,
		netnsStep("add", n.name),
		ipIn(n.name, "link set lo up"),
		ipIn(n.name, "link add %s type bridge", bridge),
		ipIn(n.name, "addr add %s/24 dev %s", n.cp, bridge),
		ipIn(n.name, "link set %s up", bridge),
		ipIn("", "link add %s type veth peer name host0 netns %s", n.hostIf, n.name),
		ipIn(n.name, "link set host0 master %s up", bridge),
		ipIn("", "addr add %s/24 dev %s", n.host, n.hostIf),
		ipIn("", "link set %s up", n.hostIf),
		ipIn(n.name, "route add default via %s", n.host),
	)
	for i := range n.nodes {
		steps = append(steps, n.nodeSteps(i)...)
	}
	return runSteps(steps)
}

// runSteps runs each command line in turn, up to the first that fails.
func runSteps(steps [][]string) error {
	for _, step := range steps {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(step, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// addNode creates the namespace of one more node, as create makes each,
// and routes its pods from every other node.
func (n *network) addNode() error {
	i := len(n.nodes)
	if i >= MaxNodes {
		return fmt.Errorf("nodecluster: a cluster has at most %d nodes", MaxNodes)
	}
	n.nodes = append(n.nodes, n.nodeNet(i))
	steps := n.nodeSteps(i)
	for _, other := range n.nodes[:i] {
		steps = append(steps, ipIn(other.name, "route add %s via %s", n.nodes[i].pods, n.nodes[i].ip))
	}
	return runSteps(steps)
}

// removeLastNode deletes the last node's namespace (and with it its end
// of the bridge) and every route to its pods.
func (n *network) removeLastNode() error {
	node := n.nodes[len(n.nodes)-1]
	n.nodes = n.nodes[:len(n.nodes)-1]
	steps := make([][]string, 0, 3+len(n.nodes))
	steps = append(steps,
		ipIn(n.name, "route del %s via %s", node.pods, node.ip),
		ipIn("", "route del %s via %s dev %s", node.pods, node.ip, n.hostIf),
	)
	for _, other := range n.nodes {
		steps = append(steps, ipIn(other.name, "route del %s via %s", node.pods, node.ip))
	}
	steps = append(steps, netnsStep("del", node.name))
	errs := make([]error, 0, len(steps))
	for _, step := range steps {
		errs = append(errs, runSteps([][]string{step}))
	}
	return errors.Join(errs...)
}

// bridge is the control plane namespace's bridge, which joins the nodes.
const bridge = "ibjbr"

// netnsStep is the ip netns command that adds or deletes (verb) the
// network namespace name.
func netnsStep(verb, name string) []string { return []string{"ip", "netns", verb, name} }

// ipIn is the ip command of the words of format, in network namespace ns
// ("" for this host's).
func ipIn(ns, format string, args ...any) []string {
	line := []string{"ip"}
	if ns != "" {
		line = append(line, "-n", ns)
	}
	return append(line, strings.Fields(fmt.Sprintf(format, args...))...)
}

// nodeSteps create node i's namespace, plug it into the bridge and route
// every other node's pods through that node.
func (n *network) nodeSteps(i int) [][]string {
	node := n.nodes[i]
	port := fmt.Sprintf("node%d", i)
	steps := make([][]string, 0, 11+len(n.nodes))
	steps = append(steps,
		netnsStep("add", node.name),
		ipIn(node.name, "link set lo up"),
		ipIn(n.name, "link add %s type veth peer name eth0 netns %s", port, node.name),
		ipIn(n.name, "link set %s master %s up", port, bridge),
		ipIn(node.name, "addr add %s/24 dev eth0", node.ip),
		ipIn(node.name, "link set eth0 up"),
		// The node's default route: kube-proxy and the kubelet look for
		// one to learn the node's address.
		ipIn(node.name, "route add default via %s", n.host),
		// The control plane and this host reach the node's pods through it.
		ipIn(n.name, "route add %s via %s", node.pods, node.ip),
		ipIn("", "route add %s via %s dev %s", node.pods, node.ip, n.hostIf),
		// What a node's kernel is set up with for pods on a bridge:
		// forwarding, and bridged traffic through iptables (so that
		// kube-proxy's rules see pod-to-Service traffic). Both are per
		// network namespace.
		nsExec(node.name, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
		nsExec(node.name, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"),
	)
	for j, other := range n.nodes {
		if j != i {
			steps = append(steps, ipIn(node.name, "route add %s via %s", other.pods, other.ip))
		}
	}
	return steps
}

// nsExec is the command line that runs a command in the namespace, in this
// host's mount namespace (unlike ip netns exec, which remounts /sys and
// so hides the cgroup hierarchies).
func nsExec(namespace string, args ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + namespace, "--"}, args...)
}

// delete removes the namespaces, and with them the veth pairs, the bridges,
// the routes and kube-proxy's rules.
func (n *network) delete() error {
	var errs []error
	if out, err := exec.Command("ip", "link", "del", n.hostIf).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", n.hostIf, err, out))
	}
	names := make([]string, 0, 1+len(n.nodes))
	names = append(names, n.name)
	for _, node := range n.nodes {
		names = append(names, node.name)
	}
	for _, name := range names {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
			errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", name, err, out))
		}
	}
	return errors.Join(errs...)
}

// unmountUnder unmounts every mount point under one of the prefixes,
// deepest first: the kubelet's volumes, containerd's root file systems and
// the pods' network namespaces left by a cluster that stopped.
func unmountUnder(prefixes ...string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		if len(fields) < 5 {
			continue
		}
		point := unescapeMount(fields[4])
		for _, prefix := range prefixes {
			if point == prefix || strings.HasPrefix(point, prefix+"/") {
				points = append(points, point)
			}
		}
	}
	_ = f.Close()
	if err := scanner.Err(); err != nil {
		return err
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	var errs []error
	for _, point := range slices.Compact(points) {
		if out, err := exec.Command("umount", "-l", point).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("umount %s: %w: %s", point, err, strings.TrimSpace(string(out))))
		}
	}
	return errors.Join(errs...)
}

// unescapeMount undoes mountinfo's octal escapes of spaces and the like.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
