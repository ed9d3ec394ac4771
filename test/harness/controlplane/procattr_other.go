//go:build !linux

package controlplane

import "syscall"

// sysProcAttr puts the child in its own process group, so a Ctrl-C in the
// terminal reaches only the parent, which stops the children in order.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
