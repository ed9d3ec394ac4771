package nodecluster

import (
	"context"
	"fmt"
	"os"
	"time"
)

// BreakNode makes node i bad, as a node of a batch fleet with a broken
// GPU, driver or disk is: every container it starts from then on exits 1,
// whatever its image and command, while its kubelet, pod sandboxes and
// network stay healthy, so that the node stays Ready, its pods' sandboxes
// and volumes are set up as anywhere else, and the scheduler keeps sending
// it pods. The containers already running there run on.
//
// The fault is a runc of the harness's own, faulty-runc
// (test/harness/cmd/faulty-runc, Options.FaultyRuntime), set as the runc
// binary (BinaryName) of this node's containerd alone: it rewrites each
// workload container's OCI bundle so that the container runs faulty-runc
// itself, bind-mounted in, which exits 1. Other ways fall short of a
// node-local fault: an OCI hook can only make runc fail to create the
// container (the kubelet then reports a StartError, exit code 128, for a
// container that never ran); a flag of the workload (the worker image) or a
// RuntimeClass would be in the pod's spec, the same on every node and only
// for the test's own image. The other nodes' containerds are untouched.
//
// Its containerd is restarted with the new configuration (SIGTERM, as a
// service manager restarts it: the containers run on), and BreakNode
// returns once the node is Ready again. On a node that is stopped it only
// rewrites the configuration, which StartNode then reads.
func (c *Cluster) BreakNode(ctx context.Context, i int) error {
	if _, err := os.Stat(c.opts.FaultyRuntime); err != nil {
		return fmt.Errorf("nodecluster: no faulty runc at %s (make node-binaries): %w", c.opts.FaultyRuntime, err)
	}
	return c.setFaulty(ctx, i, true)
}

// RepairNode undoes BreakNode: node i's containerd runs runc again.
func (c *Cluster) RepairNode(ctx context.Context, i int) error {
	return c.setFaulty(ctx, i, false)
}

// setFaulty rewrites node i's containerd configuration and restarts its
// containerd if it runs.
func (c *Cluster) setFaulty(ctx context.Context, i int, faulty bool) error {
	n := c.nodes[i]
	n.faulty = faulty
	if err := c.writeContainerdConfig(n); err != nil {
		return err
	}
	if n.containerd == nil {
		return nil
	}
	if err := c.RestartContainerd(ctx, i, 0); err != nil {
		return err
	}
	return c.WaitNodeReady(ctx, i, time.Minute)
}
