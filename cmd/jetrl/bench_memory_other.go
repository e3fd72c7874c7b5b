//go:build !linux

package main

import "syscall"

// memProcAttr: bench memory runs on Linux only (it reads /proc), so nothing is set elsewhere.
func memProcAttr() *syscall.SysProcAttr { return nil }
