package s3test

import "syscall"

// sysProcAttr kills versitygw when the test binary dies without cleaning
// up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
