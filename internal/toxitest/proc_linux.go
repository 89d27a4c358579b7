package toxitest

import "syscall"

// sysProcAttr kills toxiproxy-server when the test binary dies without
// cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
