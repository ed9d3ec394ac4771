package controlplane

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Process is a child process whose output goes to a log file. On Linux it is
// killed when the process that started it dies, however that happens, so a
// crashed test or a killed demo leaves nothing running.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartProcess starts path with args and env added to this process's
// environment, its stdout and stderr appended to logPath.
func StartProcess(name, logPath string, env []string, path string, args ...string) (*Process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop asks the process and what it started to end with SIGTERM (its
// process group: a wrapper that forks, a shell and its children), and
// kills them if the process has not ended within grace.
func (p *Process) Stop(grace time.Duration) error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	_ = p.signalGroup(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	return p.Kill()
}

// Kill ends the process and what it started (its process group) at once
// with SIGKILL, as a crash or an OOM kill would, and waits until the
// process is gone.
func (p *Process) Kill() error {
	if exited, _ := p.Exited(); exited {
		return nil
	}
	if err := p.signalGroup(syscall.SIGKILL); err != nil {
		return err
	}
	<-p.done
	return nil
}

// signalGroup sends sig to the process's group, which StartProcess made
// (sysProcAttr), so that no child outlives it; to the process alone if the
// group is gone.
func (p *Process) signalGroup(sig syscall.Signal) error {
	if err := syscall.Kill(-p.cmd.Process.Pid, sig); err == nil {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

// FreePort returns a TCP port that nothing binds now, on any address, for
// a process started later to listen on. It draws the port below the
// kernel's ephemeral range (ip_local_port_range): a port from that range,
// as a listen on port 0 gives, may become the local port of any outgoing
// connection before the process binds it (every lane of CI dials its API
// servers), and the process then fails with "address already in use".
// Below the range only another caller of FreePort can take it, and the
// draw is random among thousands of ports.
func FreePort() (int, error) {
	lo, hi := freePortFloor, ephemeralLow()
	for range 200 {
		if hi <= lo {
			break
		}
		port := lo + rand.IntN(hi-lo)
		if l, err := net.Listen("tcp", fmt.Sprintf(":%d", port)); err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	// A host whose ephemeral range leaves no room below it.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freePortFloor is the lowest port FreePort draws: above the ports that
// Kubernetes' components listen on by default (10250 to 10259) and the
// registered ports that local services commonly take.
const freePortFloor = 20000

// ephemeralLow is the first port of the kernel's ephemeral range, 32768
// (Linux's default) where it cannot be read.
func ephemeralLow() int {
	data, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if fields := strings.Fields(string(data)); len(fields) > 0 {
		if low, err := strconv.Atoi(fields[0]); err == nil {
			return low
		}
	}
	return 32768
}

// WaitHealthy polls the process's health endpoint at url every 200 ms
// until it answers 200, for up to timeout. It fails at once if the process
// exits, with the exit's error, and with ctx's error when the time is up.
func (p *Process) WaitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited (%v)", p.Name, err)
		}
		if resp, err := http.Get(url); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is not ready: %w", p.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
