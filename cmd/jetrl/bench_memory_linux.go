//go:build linux

package main

import "syscall"

// memProcAttr puts a service process of bench memory in its own process group, so that a Ctrl-C at the
// terminal reaches only jetrl, which stops its processes in order, and has the kernel kill it if jetrl dies.
func memProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
