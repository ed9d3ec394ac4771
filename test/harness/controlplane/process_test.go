package controlplane

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gone: no process has the pid, or only its zombie is left.
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return os.IsNotExist(err)
	}
	// The state follows the command's closing parenthesis.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// Stop and Kill end what the process started too: a shell's child here,
// a wrapper's forked child in a node cluster.
func TestStopAndKillEndTheChildren(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("needs /proc")
	}
	for _, how := range []string{"stop", "kill"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "child.pid")
			p, err := StartProcess("tree", filepath.Join(dir, "tree.log"), nil, "sh", "-c", `sleep 600 & echo $! > "$0"; wait`, pidFile)
			if err != nil {
				t.Fatal(err)
			}
			var child int
			deadline := time.Now().Add(10 * time.Second)
			for child == 0 && time.Now().Before(deadline) {
				b, _ := os.ReadFile(pidFile)
				child, _ = strconv.Atoi(strings.TrimSpace(string(b)))
				time.Sleep(20 * time.Millisecond)
			}
			if child == 0 {
				t.Fatal("the shell never wrote its child's pid")
			}
			if how == "stop" {
				err = p.Stop(5 * time.Second)
			} else {
				err = p.Kill()
			}
			if err != nil {
				t.Fatal(err)
			}
			for !gone(child) && time.Now().Before(deadline.Add(10*time.Second)) {
				time.Sleep(20 * time.Millisecond)
			}
			if !gone(child) {
				_ = syscall.Kill(child, syscall.SIGKILL)
				t.Errorf("after %s the shell's child %d still runs", how, child)
			}
		})
	}
}
