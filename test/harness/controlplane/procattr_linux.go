package controlplane

import "syscall"

// sysProcAttr puts the child in its own process group, so a Ctrl-C in the
// terminal reaches only the parent, which stops the children in order, and
// has the kernel kill the child if the parent dies first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
