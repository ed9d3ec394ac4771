package nodecluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/utils/ptr"
)

// AddNode adds a node to the running cluster, as Start makes each (its
// network namespace, routed to and from every other node, its containerd
// with the images imported, kube-proxy and kubelet), and returns its
// index once it is Ready. A spec that needs more nodes than the suite's
// adds them this way, for less than a cluster of that size would cost
// every other spec, and removes them with RemoveNode.
func (c *Cluster) AddNode(ctx context.Context) (int, error) {
	i := len(c.nodes)
	if err := c.net.addNode(); err != nil {
		return i, err
	}
	c.Nodes = append(c.Nodes, nodeName(i))
	nn := c.net.nodes[i]
	c.step("network namespace %s: node %s at %s, pods %s", nn.name, c.Nodes[i], nn.ip, nn.pods)
	n, err := c.newNode(i)
	if n != nil {
		c.nodes = append(c.nodes, n)
	}
	if err != nil {
		return i, err
	}
	c.step("starting node %s: containerd (importing the images of %s), kube-proxy, the kubelet", c.Nodes[i], c.opts.ImagesDir)
	if err := c.bootNode(i, true); err != nil {
		return i, err
	}
	return i, c.WaitNodeReady(ctx, i, 2*time.Minute)
}

// RemoveNode removes node i, which must be the last (AddNode's): it stops
// it as StopNode does, deletes its Node and the pods still bound to it
// (at once, as pod GC deletes the pods of a node that is gone), and removes
// what it left on this host, as Stop does for every node. Its directory,
// with its logs, is kept, renamed <name>-removed-<n>.
func (c *Cluster) RemoveNode(ctx context.Context, i int) error {
	if i != len(c.nodes)-1 {
		return fmt.Errorf("nodecluster: only the last node, %s, can be removed, not %s", c.Nodes[len(c.Nodes)-1], c.Nodes[i])
	}
	n := c.nodes[i]
	errs := []error{c.StopNode(i)}
	nodes := c.clientset.CoreV1().Nodes()
	if err := nodes.Delete(ctx, n.name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	pods, err := c.clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.nodeName", n.name).String()})
	if err != nil {
		errs = append(errs, err)
	} else {
		for _, pod := range pods.Items {
			err := c.clientset.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	errs = append(errs, unmountUnder(n.dir, n.runDir), c.net.removeLastNode(), removeCgroupRoot(n.cgroupRoot), os.RemoveAll(n.runDir))
	for k := 0; ; k++ {
		kept := fmt.Sprintf("%s-removed-%d", n.dir, k)
		if _, err := os.Stat(kept); errors.Is(err, os.ErrNotExist) {
			errs = append(errs, os.Rename(n.dir, kept))
			break
		}
	}
	c.nodes, c.Nodes = c.nodes[:i], c.Nodes[:i]
	return errors.Join(errs...)
}
