package nodecluster

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The images the node cluster imports into containerd (nothing can be
// pulled here), by the OCI layouts make node-images writes.
const (
	// PauseImage is the pod sandbox's image (containerd's sandbox_image).
	PauseImage = "ibj.local/pause:v1"
	// WorkerImage is the node specs' workload: test/nodeimages/worker.
	WorkerImage = "ibj.local/worker:v1"
	// ManagerImage is the operator's image as dist/install.yaml names it
	// when make node-images builds it (IMG=indexed-batch-job:<VERSION>):
	// docker.io/library is what a bare name means.
	ManagerImage = "docker.io/library/indexed-batch-job:" + ManagerVersion
	// ManagerVersion is the tag make node-images gives the manager's
	// image.
	ManagerVersion = "v0.0.0-node"
)

// image is an OCI layout to import, and the name the cluster knows it by.
type image struct {
	layout string // directory under the images directory
	name   string // repository, without the tag (the layout's ref.name)
}

var images = []image{
	{layout: "pause", name: "ibj.local/pause"},
	{layout: "worker", name: "ibj.local/worker"},
	{layout: "manager", name: "docker.io/library/indexed-batch-job"},
}

// containerdConfig is containerd's configuration (version 2, as containerd
// 1.6 and 1.7 read it): its state under the node's directories, the CRI
// plugin with our sandbox image and OOM scores no lower than its own, runc
// through its v2 shim with the cgroupfs driver (the kubelet's, on this
// host's cgroup v1) and its state in runcRoot (its default,
// /run/containerd/runc, is shared by every containerd of the host), and the
// CNI configuration of conf. A non-empty runcBinary replaces runc (the
// runc options' BinaryName): a broken node's faulty-runc (BreakNode).
func containerdConfig(root, state, socket, runcRoot, runcBinary, cniConf string) string {
	binaryName := ""
	if runcBinary != "" {
		binaryName = fmt.Sprintf("\n        BinaryName = %q", runcBinary)
	}
	return fmt.Sprintf(`version = 2
root = %q
state = %q

[grpc]
  address = %q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # This host withholds CAP_SYS_RESOURCE, which a negative oom_score_adj
  # (the kubelet's -998 for sandboxes, -997 for Guaranteed pods) needs:
  # runc fails to start them. Clamped at containerd's own score (0).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %q%s
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, root, state, socket, PauseImage, runcRoot, binaryName, cniBinDir, cniConf)
}

// cniBinDir is where Debian's containernetworking-plugins puts the plugins.
const cniBinDir = "/usr/lib/cni"

// cniConfig is a node's pods' network: a bridge on the node with
// host-local addresses from its pod range, kept in ipamDir (host-local's
// default, /var/lib/cni/networks/<name>, is shared by every node of the
// host), the node as their gateway, hairpin on so that a pod reaches itself
// through its Service.
func cniConfig(name, podCIDR, ipamDir string) string {
	return fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": "ibj0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
`, name, ipamDir, podCIDR)
}

// importImages imports each image's OCI layout into containerd's k8s.io
// namespace (the CRI plugin's), named as the cluster's pods name it.
func importImages(socket, imagesDir string) error {
	for _, img := range images {
		archive, err := tarDir(filepath.Join(imagesDir, img.layout))
		if err != nil {
			return fmt.Errorf("image %s: %w", img.layout, err)
		}
		cmd := exec.Command("ctr", "--address", socket, "--namespace", "k8s.io",
			"images", "import", "--base-name", img.name, "--digests", "-")
		cmd.Stdin = bytes.NewReader(archive)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("ctr images import %s: %w: %s", img.layout, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// tarDir is the directory as a tar stream, which is what ctr imports.
func tarDir(dir string) ([]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, "index.json")); err != nil {
		return nil, fmt.Errorf("no OCI image layout in %s: run make node-images", dir)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// killContainers kills every container containerd runs for the cluster
// and removes them, so that nothing outlives it: the kubelet, once
// stopped, no longer does.
func killContainers(socket string) {
	ctr := func(args ...string) string {
		out, _ := exec.Command("ctr", append([]string{"--address", socket, "--namespace", "k8s.io"}, args...)...).Output()
		return string(out)
	}
	for _, id := range strings.Fields(ctr("tasks", "ls", "-q")) {
		ctr("tasks", "kill", "--all", "--signal", "SIGKILL", id)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && strings.TrimSpace(ctr("tasks", "ls", "-q")) != "" {
		for _, id := range strings.Fields(ctr("tasks", "ls", "-q")) {
			ctr("tasks", "delete", "--force", id)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range strings.Fields(ctr("containers", "ls", "-q")) {
		ctr("containers", "delete", id)
	}
}

// killShims kills the runc shims containerd started on socket, found by
// their command line (-address socket): a shim whose containerd is gone
// lives on, holding its containers' mounts.
func killShims(socket string) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
		if !strings.HasSuffix(args[0], "containerd-shim-runc-v2") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == socket {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
