// Command faulty-runc is the runc of a node the node cluster made bad on
// purpose (nodecluster's Cluster.BreakNode names it as the runc binary of
// that node's containerd, and of no other node's). It runs the real runc
// with the same arguments, but first rewrites the OCI bundle of each
// workload container that containerd's CRI plugin creates: the container's
// process becomes this program, bind-mounted read-only into the container,
// which prints what it replaced and exits 1. So every container the node
// starts exits 1 whatever its image and command, as on a node whose GPU,
// driver or disk is broken, while its kubelet, pod sandboxes and network
// stay healthy and the node stays Ready.
//
// Pod sandboxes (annotation io.kubernetes.cri.container-type: sandbox) and
// containers not made by the CRI plugin are left alone: a sandbox that
// exits leaves its pod ContainerCreating, with no exit code at all.
//
// It must stay a static binary, since it runs inside containers of any
// image: it imports no package that needs cgo.
//
// usage, as containerd's runc shim calls it: faulty-runc [runc's global flags] create --bundle DIR ... ID
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// containerPath is where this program is mounted in a broken container,
// and so its argv[0] there.
const containerPath = "/.ibj-faulty-runc"

// exitCode is what every workload container of the node exits with.
const exitCode = 1

// The CRI plugin's annotation that tells a pod's sandbox from its
// containers.
const (
	containerTypeAnnotation = "io.kubernetes.cri.container-type"
	containerTypeContainer  = "container"
)

func main() {
	if os.Args[0] == containerPath {
		fmt.Printf("faulty-runc: this node is broken: exiting %d instead of running %q\n", exitCode, os.Args[1:])
		os.Exit(exitCode)
	}
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "faulty-runc:", err)
		os.Exit(1)
	}
}

// run rewrites the bundle of a create or run, then becomes runc.
func run(args []string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if bundle, ok := bundleOf(args); ok {
		if err := breakBundle(bundle, self); err != nil {
			return fmt.Errorf("bundle %s: %w", bundle, err)
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return err
	}
	if real, _ := filepath.EvalSymlinks(runc); real == self {
		return errors.New("runc on PATH is faulty-runc itself")
	}
	return syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
}

// bundleOf finds the bundle directory of a runc create or run command line
// (its --bundle or -b, or the working directory, as runc defaults it).
func bundleOf(args []string) (string, bool) {
	cmd := -1
	for i, a := range args {
		if a == "create" || a == "run" {
			cmd = i
			break
		}
	}
	if cmd < 0 {
		return "", false
	}
	for i := cmd + 1; i < len(args); i++ {
		a := args[i]
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			return args[i+1], true
		case strings.HasPrefix(a, "--bundle="):
			return strings.TrimPrefix(a, "--bundle="), true
		case strings.HasPrefix(a, "-b="):
			return strings.TrimPrefix(a, "-b="), true
		}
	}
	wd, err := os.Getwd()
	return wd, err == nil
}

// breakBundle rewrites the bundle's config.json with breakConfig.
func breakBundle(bundle, self string) error {
	path := filepath.Join(bundle, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, changed, err := breakConfig(data, self)
	if err != nil || !changed {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, info.Mode().Perm())
}

// breakConfig makes a workload container's OCI configuration run self,
// bind-mounted at containerPath, with the container's own arguments after
// it (which it prints): every field it does not touch is kept as it was,
// numbers to the digit. A sandbox's configuration, or one the CRI plugin
// did not make, comes back unchanged.
func breakConfig(data []byte, self string) ([]byte, bool, error) {
	var config map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&config); err != nil {
		return nil, false, err
	}
	annotations, _ := config["annotations"].(map[string]any)
	if annotations[containerTypeAnnotation] != containerTypeContainer {
		return data, false, nil
	}
	process, ok := config["process"].(map[string]any)
	if !ok {
		return nil, false, errors.New("no process")
	}
	args, _ := process["args"].([]any)
	process["args"] = append([]any{containerPath}, args...)
	mounts, _ := config["mounts"].([]any)
	config["mounts"] = append(mounts, map[string]any{
		"destination": containerPath,
		"type":        "bind",
		"source":      self,
		"options":     []any{"rbind", "ro", "nosuid", "nodev"},
	})
	out, err := json.Marshal(config)
	return out, true, err
}
