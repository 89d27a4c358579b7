//go:build !linux

package toxitest

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
