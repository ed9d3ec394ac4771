package nodecluster

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Each kubelet gets a cgroup parent of its own (its cgroupRoot), made here
// in every cgroup v1 hierarchy, because the kubelets of one host share the
// hierarchies: under a shared root each kubelet would see the others' pod
// cgroups as orphans of its own and kill them. It is the node's "machine":
// StopNode kills every process in it.

// cgroupHierarchies are the mount points of this host's cgroup v1
// hierarchies, and with v2 the cgroup2 one beside them (it has no
// controllers here, but runc makes the containers' cgroups there too).
func cgroupHierarchies(v2 bool) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var points []string
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		// ... mount-point ... - fstype source options
		before, after, ok := strings.Cut(scanner.Text(), " - ")
		fields := strings.Fields(before)
		if ok && len(fields) >= 5 && (strings.HasPrefix(after, "cgroup ") || v2 && strings.HasPrefix(after, "cgroup2 ")) {
			points = append(points, unescapeMount(fields[4]))
		}
	}
	slices.Sort(points)
	return slices.Compact(points), scanner.Err()
}

// makeCgroupRoot creates the cgroup root in every hierarchy, the cpuset's
// with its parent's CPUs and memory nodes (an empty cpuset takes no task).
func makeCgroupRoot(root string) error {
	hierarchies, err := cgroupHierarchies(false)
	if err != nil {
		return err
	}
	for _, h := range hierarchies {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			value, err := os.ReadFile(filepath.Join(h, file))
			if err != nil {
				continue // not the cpuset hierarchy
			}
			if err := os.WriteFile(filepath.Join(dir, file), value, 0o644); err != nil {
				return fmt.Errorf("%s: %w", filepath.Join(dir, file), err)
			}
		}
	}
	return nil
}

// killCgroup sends SIGKILL to every process in the cgroup root (the
// node's containers and pod sandboxes) until none is left, for up to 10s.
func killCgroup(root string) error {
	hierarchies, err := cgroupHierarchies(false)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := map[int]bool{}
		for _, h := range hierarchies {
			for _, pid := range cgroupPids(filepath.Join(h, root)) {
				pids[pid] = true
			}
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in cgroup %s: %v", root, pids)
		}
		for pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupPids are the processes in dir's cgroup and the cgroups below it.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(path)
		for _, field := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(field); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// removeCgroupRoot removes the cgroup root and every cgroup below it,
// deepest first, in every hierarchy.
func removeCgroupRoot(root string) error {
	hierarchies, err := cgroupHierarchies(true)
	if err != nil {
		return err
	}
	var errs []error
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(path string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
		slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
		for _, dir := range dirs {
			if err := syscall.Rmdir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", dir, err))
			}
		}
	}
	return errors.Join(errs...)
}
