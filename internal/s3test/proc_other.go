//go:build !linux

package s3test

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
