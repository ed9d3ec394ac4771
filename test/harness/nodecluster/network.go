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

// network is the cluster's own network namespace and its addresses. Every
// component runs inside it (nsenter --net), so kube-proxy's iptables rules,
// the pods' bridge and every port stay there, and are gone with it; a veth
// pair joins it to this host, which reaches the API server at the node's
// address. Slot n picks the addresses, from ranges reserved for network
// tests (RFC 2544):
//
//	198.19.n.1    this host's end of the veth pair
//	198.19.n.2    the node: its end, the API server's and kubelet's address
//	198.18.n.0/24 the pods, on the bridge ibj0 (198.18.n.1 its gateway)
//	198.18.(128+n).0/24 the Services' cluster IPs
type network struct {
	slot   int
	name   string // the namespace, under /run/netns
	hostIf string // this host's end of the veth pair
	host   net.IP
	node   net.IP
	pods   string // CIDR
	svcs   string // CIDR
	// kubernetesIP is the kubernetes Service's cluster IP: the first of
	// svcs.
	kubernetesIP net.IP
}

const maxSlots = 100

// newNetwork creates the namespace of the first free slot, and the veth
// pair into it.
func newNetwork() (*network, error) {
	for slot := range maxSlots {
		name := fmt.Sprintf("ibj-node-%d", slot)
		if _, err := os.Stat(filepath.Join("/run/netns", name)); err == nil {
			continue
		}
		n := &network{
			slot:         slot,
			name:         name,
			hostIf:       fmt.Sprintf("ibjh%d", slot),
			host:         net.IPv4(198, 19, byte(slot), 1),
			node:         net.IPv4(198, 19, byte(slot), 2),
			pods:         fmt.Sprintf("198.18.%d.0/24", slot),
			svcs:         fmt.Sprintf("198.18.%d.0/24", 128+slot),
			kubernetesIP: net.IPv4(198, 18, byte(128+slot), 1),
		}
		if err := n.create(); err != nil {
			_ = n.delete()
			return nil, err
		}
		return n, nil
	}
	return nil, fmt.Errorf("no free network slot: /run/netns/ibj-node-0 to -%d all exist (ip netns del the ones no cluster runs in)", maxSlots-1)
}

func (n *network) create() error {
	nodeIf := fmt.Sprintf("ibjn%d", n.slot)
	steps := [][]string{
		{"ip", "netns", "add", n.name},
		{"ip", "-n", n.name, "link", "set", "lo", "up"},
		{"ip", "link", "add", n.hostIf, "type", "veth", "peer", "name", nodeIf, "netns", n.name},
		{"ip", "addr", "add", n.host.String() + "/24", "dev", n.hostIf},
		{"ip", "link", "set", n.hostIf, "up"},
		{"ip", "-n", n.name, "addr", "add", n.node.String() + "/24", "dev", nodeIf},
		{"ip", "-n", n.name, "link", "set", nodeIf, "up"},
		// The node's default route: kube-proxy and the kubelet look for
		// one to learn the node's address.
		{"ip", "-n", n.name, "route", "add", "default", "via", n.host.String()},
		// What a node's kernel is set up with for pods on a bridge:
		// forwarding, and bridged traffic through iptables (so that
		// kube-proxy's rules see pod-to-Service traffic). Both are per
		// network namespace.
		n.exec("sysctl", "-q", "-w", "net.ipv4.ip_forward=1"),
		n.exec("sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"),
	}
	for _, step := range steps {
		if out, err := exec.Command(step[0], step[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(step, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// exec is the command line that runs a command in the namespace, in this
// host's mount namespace (unlike ip netns exec, which remounts /sys and
// so hides the cgroup hierarchies).
func (n *network) exec(args ...string) []string {
	return append([]string{"nsenter", "--net=/run/netns/" + n.name, "--"}, args...)
}

// delete removes the namespace, and with it the veth pair, the bridge and
// kube-proxy's rules.
func (n *network) delete() error {
	var errs []error
	if out, err := exec.Command("ip", "link", "del", n.hostIf).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, fmt.Errorf("ip link del %s: %w: %s", n.hostIf, err, out))
	}
	if out, err := exec.Command("ip", "netns", "del", n.name).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such file") {
		errs = append(errs, fmt.Errorf("ip netns del %s: %w: %s", n.name, err, out))
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
