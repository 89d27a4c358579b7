package storage

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// rawTCP returns c (a *net.TCPConn) with Read and Write made as raw system
// calls on its non-blocking socket, waiting in the netpoller whenever the
// socket is not ready. An ordinary system call enters the runtime's
// syscall state and wakes its monitor thread when that sleeps, a futex
// wake and a thread that then polls every 20 µs for a while; on a mount
// whose one thread sends a GET and reads its response per image, those
// wake-ups were an eighth of its CPU. A raw call on a non-blocking socket
// never blocks, so nothing is lost by skipping that state. Deadlines and
// Close work as on c.
func rawTCP(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	return &rawTCPConn{TCPConn: tc, rc: rc}
}

type rawTCPConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *rawTCPConn) Read(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	var n int
	var errno syscall.Errno
	err := c.rc.Read(func(fd uintptr) bool {
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
			if e == syscall.EINTR {
				continue
			}
			n, errno = int(r), e
			return e != syscall.EAGAIN
		}
	})
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: errno}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (c *rawTCPConn) Write(b []byte) (int, error) {
	done := 0
	for done < len(b) {
		var n int
		var errno syscall.Errno
		err := c.rc.Write(func(fd uintptr) bool {
			for {
				r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done))
				if e == syscall.EINTR {
					continue
				}
				n, errno = int(r), e
				return e != syscall.EAGAIN
			}
		})
		if err == nil && errno != 0 {
			err = errno
		}
		if err != nil {
			return done, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
		}
		done += n
	}
	return done, nil
}
