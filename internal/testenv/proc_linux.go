package testenv

import "syscall"

// sysProcAttr kills a Daemon when the test binary dies without stopping it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
