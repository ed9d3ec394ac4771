package controlplane

import (
	"errors"
	"fmt"
	"net"
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

// FreePort draws from below the kernel's ephemeral range, where no
// outgoing connection takes the port before the process binds it, and
// the port is free on every address.
func TestFreePortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	below := low > freePortFloor // else FreePort falls back to port 0
	seen := map[int]bool{}
	for range 20 {
		port, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if below && (port < freePortFloor || port >= low) {
			t.Fatalf("port %d, want one in [%d, %d)", port, freePortFloor, low)
		}
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			t.Fatalf("port %d is not free on every address: %v", port, err)
		}
		_ = l.Close()
		seen[port] = true
	}
	if len(seen) < 10 {
		t.Errorf("20 draws gave %d ports: the draw is not random", len(seen))
	}
}
