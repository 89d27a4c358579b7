package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Server serves a FUSE connection: the requests of the file system mounted at its folder.
//
// It is written here rather than taken from go-fuse's fuse.Server because
// of what a request costs on a machine whose cores decode images. A
// fuse.Server reads /dev/fuse with blocking read(2) calls; in Go every
// blocking system call hands its processor to the runtime's monitor thread,
// which wakes to take it back, so each request costs several thread
// switches and, measured with an unchanged DataLoader reading the mount,
// about 100 µs of CPU. Server instead reads a non-blocking /dev/fuse
// through the runtime's netpoller (an idle server waits in epoll, not in a
// system call) and reads requests and writes replies with raw system calls,
// which never block here: a request is read only once epoll says one is
// queued, and the kernel takes a reply without waiting for anyone. The
// requests themselves are decoded and answered by go-fuse's ProtocolServer,
// so the file system is go-fuse's node API as before.
//
// Notifications to the kernel (invalidations, written by other goroutines)
// use ordinary system calls: the kernel may wait in them for a READ in
// flight, whose reply another goroutine must be free to write.
type Server struct {
	dir  string
	file *os.File // /dev/fuse, non-blocking, on the netpoller
	conn syscall.RawConn
	ps   *fuse.ProtocolServer

	bufSize int
	bufs    sync.Pool

	// idle counts serving goroutines waiting for a request (in read or
	// about to be); one more is started when the last one takes a
	// request, and a goroutine done with its request goes back only if
	// fewer than maxIdle wait.
	idle   atomic.Int32
	loops  sync.WaitGroup
	gone   sync.Once
	closed atomic.Bool

	init     fuse.InitIn
	notifies bool // the kernel takes NOTIFY_INVAL_INODE
	log      *log.Logger
}

const (
	maxIdle = 8
	// inHeaderSize is the size of fuse_in_header, which starts every
	// request.
	inHeaderSize = int(unsafe.Sizeof(fuse.InHeader{}))
	// pollHackName is the name go-fuse's ProtocolServer answers at the
	// root for one purpose: a poll(2) of it draws the kernel's first POLL
	// request, answered ENOSYS, so the kernel never sends POLL again. A
	// program that epolls a file of the mount would otherwise wait on this
	// server's reply.
	pollHackName = ".go-fuse-epoll-hack"
)

// fuseMaxWrite is the largest READ (and WRITE) the kernel allows a FUSE
// server, from /proc/sys/fs/fuse/max_pages_limit (256 pages by default).
func fuseMaxWrite() int {
	pages := 256
	if b, err := os.ReadFile("/proc/sys/fs/fuse/max_pages_limit"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			pages = n
		}
	}
	return pages * os.Getpagesize()
}

// Serve mounts dir with mo, answers INIT, and starts serving raw.
func Serve(dir string, raw fuse.RawFileSystem, mo fuse.MountOptions) (*Server, error) {
	if mo.Logger == nil {
		mo.Logger = log.Default()
	}
	mo.MaxWrite = min(mo.MaxWrite, fuseMaxWrite())
	fd, err := mountFUSE(dir, &mo)
	if err != nil {
		return nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		unmountFUSE(dir)
		return nil, err
	}
	s := &Server{
		dir:  dir,
		file: os.NewFile(uintptr(fd), "/dev/fuse"),
		ps:   fuse.NewProtocolServer(raw, &mo),
		log:  mo.Logger,
		// The largest request is a WRITE of MaxWrite bytes and its
		// headers; the kernel wants room for at least 8 KiB.
		bufSize: max(mo.MaxWrite+4096, 8192),
	}
	s.bufs.New = func() any { b := make([]byte, s.bufSize); return &b }
	if s.conn, err = s.file.SyscallConn(); err == nil {
		err = s.handshake()
	}
	if err != nil {
		s.detach()
		if uerr := unmountFUSE(dir); uerr != nil {
			unix.Unmount(dir, unix.MNT_DETACH) // leave no dead mount behind
		}
		return nil, fmt.Errorf("FUSE handshake: %w", err)
	}
	s.idle.Store(1)
	s.loops.Add(1)
	go s.loop()
	setReadahead(dir, mo.MaxWrite)
	// The poll(2) of the hack file waits for this server's reply, so it
	// comes after the loop has started.
	if fd, err := unix.Open(filepath.Join(dir, pollHackName), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
		if holdPollHack != nil {
			holdPollHack()
		}
		unix.Close(fd)
	}
	return s, nil
}

// handshake answers the kernel's INIT, the first request, and records what
// the kernel offered.
func (s *Server) handshake() error {
	in, n, err := s.read()
	if err != nil {
		return err
	}
	defer s.putBuf(in)
	out := s.getBuf()
	defer s.putBuf(out)
	req := (*in)[:n]
	if n < inHeaderSize || binary.NativeEndian.Uint32(req[4:8]) != 26 { // FUSE_INIT
		return errors.New("the kernel's first request is not INIT")
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&s.init)), unsafe.Sizeof(s.init)), req) // InitIn starts with the header
	if err := s.answer(req, *out); err != nil {
		return err
	}
	s.notifies = s.init.Minor >= 12
	return nil
}

// setReadahead raises the kernel's read-ahead window for the mount to
// bytes, where it may (root): the kernel starts a FUSE mount at 128 KiB,
// and a server can only lower that in INIT, so a larger file would take
// several READs although one may carry up to MaxWrite.
func setReadahead(dir string, bytes int) {
	var st unix.Stat_t
	if unix.Stat(dir, &st) != nil {
		return
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	os.WriteFile(p, []byte(strconv.Itoa(bytes>>10)), 0) // best effort
}

// KernelSettings returns what the kernel sent in INIT: its protocol
// version and the capabilities it offers.
func (s *Server) KernelSettings() fuse.InitIn { return s.init }

func (s *Server) getBuf() *[]byte  { return s.bufs.Get().(*[]byte) }
func (s *Server) putBuf(b *[]byte) { s.bufs.Put(b) }

// loop serves requests until the mount goes away. The goroutine that takes
// a request answers it itself (no hand-off), after making sure another
// goroutine waits for the next one: a READ waiting for storage must not
// hold up the others. A goroutine holds buffers only while it serves a
// request, so up to maxIdle goroutines wait for one: fewer would make the
// goroutines that answered READs from storage exit and new ones start (and
// grow their stacks) for the next requests.
func (s *Server) loop() {
	defer s.loops.Done()
	for {
		in, n, err := s.read()
		if errors.Is(err, syscall.ENOENT) {
			continue // a request interrupted before it was read
		}
		if err != nil {
			s.idle.Add(-1)
			if !errors.Is(err, syscall.ENODEV) && !s.closed.Load() {
				s.log.Printf("reading /dev/fuse: %v; the mount at %s stops answering", err, s.dir)
			}
			s.detach()
			return
		}
		if s.idle.Add(-1) == 0 {
			s.idle.Add(1)
			s.loops.Add(1)
			go s.loop()
		}
		out := s.getBuf()
		err = s.answer((*in)[:n], *out)
		s.putBuf(out)
		s.putBuf(in)
		if err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENODEV) {
			// ENOENT: the request was interrupted and is gone; ENODEV:
			// the mount is.
			s.log.Printf("answering a FUSE request: %v", err)
		}
		for {
			i := s.idle.Load()
			if i >= maxIdle {
				return
			}
			if s.idle.CompareAndSwap(i, i+1) {
				break
			}
		}
	}
}

// read reads one request into a buffer of the pool, waiting in the
// netpoller (without a buffer) while none is queued.
func (s *Server) read() (*[]byte, int, error) {
	var buf *[]byte
	var n int
	var errno syscall.Errno
	err := s.conn.Read(func(fd uintptr) bool {
		buf = s.getBuf()
		for {
			r, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&(*buf)[0])), uintptr(len(*buf)))
			if e == syscall.EINTR {
				continue
			}
			n, errno = int(r), e
			if e == syscall.EAGAIN {
				s.putBuf(buf)
				buf = nil
				return false
			}
			return true
		}
	})
	if err == nil && errno != 0 {
		err = errno
	}
	if err != nil {
		if buf != nil {
			s.putBuf(buf)
		}
		return nil, 0, err
	}
	return buf, n, nil
}

// answer has the ProtocolServer answer req and writes its reply, if any.
func (s *Server) answer(req, out []byte) error {
	n, st := s.ps.HandleRequest([][]byte{req}, [][]byte{out})
	if !st.Ok() {
		// A request the ProtocolServer could not take still gets a
		// reply, EIO, or its caller would wait for ever.
		if len(req) < inHeaderSize {
			return fmt.Errorf("a request of %d bytes, too short for its header", len(req))
		}
		binary.NativeEndian.PutUint32(out[0:], 16)
		eio := -int32(syscall.EIO)
		binary.NativeEndian.PutUint32(out[4:], uint32(eio))
		copy(out[8:16], req[8:16]) // unique
		n = 16
		s.log.Printf("answering EIO to a FUSE request (opcode %d) that could not be decoded: %v", binary.NativeEndian.Uint32(req[4:8]), st)
	}
	if n == 0 { // FORGET and others take no reply
		return nil
	}
	noFlushPollHack(req, out[:n])
	var errno syscall.Errno
	err := s.conn.Control(func(fd uintptr) {
		_, _, errno = syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&out[0])), uintptr(n))
	})
	if err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// holdPollHack, set by tests, runs while the poll hack's file is open.
var holdPollHack func()

// Offsets in requests and replies: fuse_in_header's opcode and nodeid;
// fuse_out_header's error, and the first byte after it; fuse_open_out's
// open_flags.
const (
	inOpcode      = 4
	inNodeID      = 16
	outError      = 4
	outBody       = 16
	openOutFlags  = 8
	fuseOpen      = 14
	pollHackInode = ^uint64(0) // go-fuse's
)

// noFlushPollHack marks the reply to the OPEN of the poll hack's file
// FOPEN_NOFLUSH: closing it then asks nothing of this server. The server
// holds that file open for a moment after it starts serving; killed then
// (SIGKILL), the process closed it as it exited, and waited for ever for
// the answer to the FLUSH that it could no longer give, in state D, its
// mount dead.
func noFlushPollHack(req, out []byte) {
	if len(req) < inHeaderSize || len(out) < outBody+openOutFlags+4 ||
		binary.NativeEndian.Uint32(req[inOpcode:]) != fuseOpen ||
		binary.NativeEndian.Uint64(req[inNodeID:]) != pollHackInode ||
		binary.NativeEndian.Uint32(out[outError:]) != 0 {
		return
	}
	f := out[outBody+openOutFlags:]
	binary.NativeEndian.PutUint32(f, binary.NativeEndian.Uint32(f)|fuse.FOPEN_NOFLUSH)
}

// Invalidate tells the kernel to drop its cached copy of bytes [off,
// off+size) of inode ino (size 0: to the end), and its attributes. An
// error means the kernel no longer knows the inode, so holds nothing of it,
// or the mount is gone.
func (s *Server) Invalidate(ino uint64, off, size int64) error {
	if !s.notifies {
		return syscall.ENOSYS
	}
	// fuse_out_header (len, error = FUSE_NOTIFY_INVAL_INODE, unique 0),
	// then fuse_notify_inval_inode_out (ino, off, len).
	var msg [16 + 24]byte
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint32(msg[4:], 2)
	binary.NativeEndian.PutUint64(msg[16:], ino)
	binary.NativeEndian.PutUint64(msg[24:], uint64(off))
	binary.NativeEndian.PutUint64(msg[32:], uint64(size))
	var werr error
	err := s.conn.Control(func(fd uintptr) {
		_, werr = unix.Write(int(fd), msg[:]) // may wait: an ordinary system call
	})
	if err != nil {
		return err
	}
	return werr
}

// detach closes the FUSE device once, waking every goroutine waiting on it.
func (s *Server) detach() {
	s.gone.Do(func() {
		s.closed.Store(true)
		s.file.Close()
	})
}

// Unmount unmounts the mount and waits until no request is being served.
// It fails (EBUSY) while programs have files of the mount open; the mount
// then stays as it was.
func (s *Server) Unmount() error {
	if err := unmountFUSE(s.dir); err != nil {
		return err
	}
	s.Wait()
	return nil
}

// Abort closes the FUSE device: the kernel aborts the connection, so reads
// of files still open fail with ENOTCONN, and the server's loops end once
// the requests they serve are answered.
func (s *Server) Abort() { s.detach() }

// Wait returns once the mount is gone and every request is answered.
func (s *Server) Wait() {
	s.loops.Wait()
	s.detach()
}

// mountFUSE mounts a FUSE file system at dir, read-only (MS_RDONLY: the
// kernel refuses every write open and writable shared mapping itself), and
// returns the /dev/fuse descriptor to serve it from: by mount(2) as root, else (or if that is
// refused, as in a user namespace) through the fusermount3 helper, which
// mounts and passes the descriptor back over a socket (_FUSE_COMMFD).
func mountFUSE(dir string, mo *fuse.MountOptions) (int, error) {
	opts := append([]string{}, mo.Options...)
	if mo.AllowOther {
		opts = append(opts, "allow_other")
	}
	opts = append(opts, fmt.Sprintf("max_read=%d", mo.MaxWrite))
	if os.Geteuid() == 0 {
		fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("opening /dev/fuse: %w", err)
		}
		data := append([]string{
			fmt.Sprintf("fd=%d", fd),
			fmt.Sprintf("rootmode=%o", unix.S_IFDIR),
			fmt.Sprintf("user_id=%d", os.Geteuid()),
			fmt.Sprintf("group_id=%d", os.Getegid()),
		}, opts...)
		err = unix.Mount(mo.FsName, dir, "fuse."+mo.Name, unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, strings.Join(data, ","))
		if err == nil {
			return fd, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EPERM) {
			return -1, fmt.Errorf("mount(2): %w", err)
		}
	}
	bin, err := fusermount()
	if err != nil {
		return -1, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socketpair: %w", err)
	}
	local, remote := os.NewFile(uintptr(pair[0]), "fusermount-local"), os.NewFile(uintptr(pair[1]), "fusermount-remote")
	defer local.Close()
	defer remote.Close()
	if mo.FsName != "" {
		opts = append(opts, "fsname="+mo.FsName)
	}
	opts = append(opts, "subtype="+mo.Name, "ro")
	esc := strings.NewReplacer(`\`, `\\`, `,`, `\,`)
	for i, o := range opts {
		opts[i] = esc.Replace(o)
	}
	cmd := exec.Command(bin, "-o", strings.Join(opts, ","), "--", dir)
	cmd.Env = append(os.Environ(), "_FUSE_COMMFD=3")
	cmd.ExtraFiles = []*os.File{remote}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return -1, fmt.Errorf("%s: %v: %s", filepath.Base(bin), err, strings.TrimSpace(stderr.String()))
	}
	buf, oob := make([]byte, 4), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(int(local.Fd()), buf, oob, 0)
	if err != nil {
		return -1, fmt.Errorf("receiving the FUSE descriptor from %s: %w", filepath.Base(bin), err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err == nil && len(msgs) == 1 {
		var fds []int
		if fds, err = unix.ParseUnixRights(&msgs[0]); err == nil && len(fds) == 1 {
			unix.CloseOnExec(fds[0])
			return fds[0], nil
		}
	}
	return -1, fmt.Errorf("%s passed no FUSE descriptor back", filepath.Base(bin))
}

// unmountFUSE unmounts dir served by this process: umount2 as root, else
// fusermount3 -u.
func unmountFUSE(dir string) error {
	if os.Geteuid() == 0 {
		err := unix.Unmount(dir, 0)
		if err == nil || !errors.Is(err, unix.EPERM) {
			if err != nil {
				return fmt.Errorf("unmounting %s: %w", dir, err)
			}
			return nil
		}
	}
	return Unmount(dir)
}
