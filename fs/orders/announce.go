package orders

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/sockpath"
)

// The announce socket.
//
// The mount's superblock is read-only (MS_RDONLY), so that the kernel
// itself refuses every write open and writable shared mapping of the
// tree, whoever asks; nothing in the tree can take a write. Orders that
// are not read from .ffcvfs/orders are announced through a Unix socket
// instead: .ffcvfs/announce is a symlink to it, so a program connects to
// MOUNTPOINT/.ffcvfs/announce and the kernel follows the link. The socket
// lies in a folder of its own (mode 0700, owned by the mount's user) and
// is itself 0600: only the mount's owner, and root, can connect, and the
// mount checks the peer's uid again (SO_PEERCRED), which also names the
// process whose plan the order becomes.
//
// The protocol is plain text, so a shell one-liner can speak it:
//
//	client: sample ids, one per line (or a first line "imagefolder" and
//	        then ImageFolder indices); then it closes its side for writing
//	mount:  "ok N\n" once the N samples are announced, or
//	        "error: SENTENCE\n" naming the line and the cause; then it
//	        closes the connection
//
// For example: printf 'imagefolder\n3\n1\n' | socat - UNIX-CONNECT:MNT/.ffcvfs/announce
//
// Every number is bounded before it is used: a line may hold at most
// MaxAnnounceLine bytes, an order at most MaxAnnounceFactor × the samples
// of the beton, the connections served at once are at most
// maxAnnounceConns, and a client that sends nothing for announceIdle, or
// has not sent its whole order within announceTotal, is dropped. The work
// per byte received is constant. An accept that fails (no file descriptor
// left) is tried again, after up to maxAcceptDelay: the socket outlives a
// moment of exhaustion.

const (
	// MaxAnnounceLine bounds a line of an announcement: a number of up to
	// 20 digits and some spaces.
	MaxAnnounceLine = 64
	// MaxAnnounceFactor bounds the length of an order: each sample up to
	// this many times.
	MaxAnnounceFactor = 4
	// maxAnnounceConns bounds the connections served at once; others wait
	// in the listener's backlog.
	maxAnnounceConns = 16
	// announceIdle drops a connection that sends nothing for this long.
	announceIdle = time.Minute
	// announceTotal drops a connection whose announcement is not in by
	// then, however it trickles in: an order of 4 × a hundred million
	// samples crosses a Unix socket in seconds.
	announceTotal = 2 * time.Minute
	// maxAcceptDelay bounds the wait between tries of an accept that
	// failed for want of file descriptors or memory.
	maxAcceptDelay = time.Second
	// announceSocketName is the socket's name in its folder.
	announceSocketName = "announce.sock"
	// announceDirPrefix starts the name of the socket's folder.
	announceDirPrefix = "ffcvfs-"
	// SocketPathExtra is the most bytes the socket's path takes after its
	// parent folder: /ffcvfs-NNNNNNNNNN/announce.sock (MkdirTemp's random
	// part is at most 10 digits).
	SocketPathExtra = 1 + len(announceDirPrefix) + 10 + 1 + len(announceSocketName)
)

// ErrBadInput marks an announcement that breaks the protocol's rules.
var ErrBadInput = errors.New("bad announcement")

// Announcer serves the announce socket.
type Announcer struct {
	l       *Leases
	samples Samples
	dir     string // the socket's folder, 0700; removed at close
	path    string // the socket, 0600
	ln      *net.UnixListener

	announced atomic.Uint64
	errors    atomic.Uint64

	// idle and total are announceIdle and announceTotal, which tests
	// shorten.
	idle, total atomic.Int64  // nanoseconds
	done        chan struct{} // closed by close

	mu    sync.Mutex
	conns map[net.Conn]struct{} // open connections; guarded by mu
	wg    sync.WaitGroup
}

// Samples says what the ids an announcement names are: sample ids below
// N, or, after a first line "imagefolder", ImageFolder indices, each the
// sample ImageFolder[i].
type Samples struct {
	N           int
	ImageFolder []uint32
}

// StartAnnouncer creates the socket's folder in parent (created 0700 if
// missing) and starts serving the socket, whose announcements become plans
// of l's. It first removes the folders of mounts of the same user that
// ended without closing theirs (removeStale).
func StartAnnouncer(parent string, l *Leases, samples Samples) (*Announcer, error) {
	if err := sockpath.Check("the announce socket", filepath.Join(parent, announceDirPrefix+"NNNNNNNNNN", announceSocketName)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("announce socket: %w", err)
	}
	if n := removeStale(parent, time.Now()); n > 0 {
		l.opts.Logger.Info("removed the announce socket folders of mounts that ended without closing them", "folder", parent, "count", n)
	}
	dir, err := os.MkdirTemp(parent, announceDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("announce socket: %w", err)
	}
	path := filepath.Join(dir, announceSocketName)
	// The folder is 0700 (MkdirTemp), so the socket is never reachable by
	// others, even for the moment before its mode is set.
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err == nil {
		err = os.Chmod(path, 0o600)
	}
	if err != nil {
		if ln != nil {
			ln.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("announce socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	a := &Announcer{l: l, samples: samples, dir: dir, path: path, ln: ln, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	a.idle.Store(int64(announceIdle))
	a.total.Store(int64(announceTotal))
	a.wg.Add(1)
	go a.serve()
	return a, nil
}

// Bounds of removeStale: the entries of parent it looks at, and the age
// of a socket before a refused connection says its mount is gone (a
// socket is bound a moment before it listens).
const (
	maxStaleScan = 4096
	staleAge     = time.Minute
)

// removeStale removes from parent the announce folders (ffcvfs-*, 0700,
// the caller's own) whose socket, bound over staleAge ago, refuses
// connections: their mount was killed before it could remove them, and
// a machine whose mounts are killed now and then would otherwise gather
// them for good. A folder holding anything but its socket stays. It
// returns how many it removed.
func removeStale(parent string, now time.Time) int {
	d, err := os.Open(parent)
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(maxStaleScan)
	d.Close()
	removed := 0
	for _, name := range names {
		if len(name) <= len(announceDirPrefix) || !strings.HasPrefix(name, announceDirPrefix) {
			continue
		}
		dir := filepath.Join(parent, name)
		var st syscall.Stat_t
		if syscall.Lstat(dir, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR ||
			st.Uid != uint32(os.Getuid()) || st.Mode&0o777 != 0o700 {
			continue
		}
		sock := filepath.Join(dir, announceSocketName)
		if syscall.Lstat(sock, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK ||
			st.Uid != uint32(os.Getuid()) || now.Sub(time.Unix(st.Mtim.Unix())) < staleAge {
			continue
		}
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			c.Close()
			continue
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			continue
		}
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 1 {
			continue
		}
		if os.Remove(sock) == nil && os.Remove(dir) == nil {
			removed++
		}
	}
	return removed
}

func (a *Announcer) serve() {
	defer a.wg.Done()
	sem := make(chan struct{}, maxAnnounceConns)
	var delay time.Duration
	for {
		sem <- struct{}{}
		c, err := a.ln.AcceptUnix()
		if err != nil {
			<-sem
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or memory, or a connection that
			// went before it was taken: try again, as net/http does,
			// and say so once per run of failures.
			if delay == 0 {
				a.l.opts.Logger.Warn("announce socket: accept failed; trying again", "err", err)
				delay = 5 * time.Millisecond
			} else {
				delay = min(2*delay, maxAcceptDelay)
			}
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-a.done:
				t.Stop()
				return
			}
			continue
		}
		delay = 0
		a.mu.Lock()
		a.conns[c] = struct{}{}
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer func() { <-sem }()
			a.handle(c)
			a.mu.Lock()
			delete(a.conns, c)
			a.mu.Unlock()
			c.Close()
		}()
	}
}

// Path returns the socket's path.
func (a *Announcer) Path() string { return a.path }

// Announced returns how many orders were announced; Errors, how many
// announcements failed.
func (a *Announcer) Announced() uint64 { return a.announced.Load() }

// Errors returns how many announcements failed.
func (a *Announcer) Errors() uint64 { return a.errors.Load() }

// Close stops the socket, drops the connections and removes the folder.
func (a *Announcer) Close() {
	close(a.done)
	a.ln.Close()
	a.mu.Lock()
	for c := range a.conns {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	os.RemoveAll(a.dir)
}

// handle reads one announcement from c and answers it.
func (a *Announcer) handle(c *net.UnixConn) {
	l := a.l
	idle, total := time.Duration(a.idle.Load()), time.Duration(a.total.Load())
	// The answer, too, must go in time: a client that reads nothing
	// holds no slot for long.
	c.SetWriteDeadline(time.Now().Add(total + idle))
	cred, err := peerCred(c)
	if err != nil {
		fmt.Fprintf(c, "error: %v\n", err)
		return
	}
	if cred.Uid != l.opts.Owner && cred.Uid != 0 {
		fmt.Fprintf(c, "error: only the mount's owner (uid %d) may announce orders; uid %d may read orders from %s/%s\n", l.opts.Owner, cred.Uid, control.Dir, control.OrdersDir)
		return
	}
	order, err := a.samples.read(&idleReader{c: c, idle: idle, total: total, end: time.Now().Add(total)})
	if err != nil {
		a.errors.Add(1)
		fmt.Fprintf(c, "error: %v\n", err)
		return
	}
	id := fmt.Sprintf("announce:uid-%d:pid-%d", cred.Uid, cred.Pid)
	if err := l.Announce(cred.Uid, uint32(cred.Pid), id, order); err != nil {
		fmt.Fprintf(c, "error: %v\n", err)
		return
	}
	a.announced.Add(1)
	fmt.Fprintf(c, "ok %d\n", len(order))
}

// idleReader reads from c, dropping it when nothing arrives for idle, or
// at end, whichever comes first.
type idleReader struct {
	c           net.Conn
	idle, total time.Duration
	end         time.Time // the start and total
}

func (r *idleReader) Read(p []byte) (int, error) {
	deadline := time.Now().Add(r.idle)
	whole := r.end.Before(deadline)
	if whole {
		deadline = r.end
	}
	r.c.SetReadDeadline(deadline)
	n, err := r.c.Read(p)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		if whole {
			err = fmt.Errorf("the order was not all in after %v", r.total)
		} else {
			err = fmt.Errorf("nothing received for %v", r.idle)
		}
	}
	return n, err
}

func peerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, fmt.Errorf("reading the peer's credentials: %w", cerr)
	}
	return cred, nil
}

// read reads an order from r until EOF: sample ids, one per line, or a
// first line "imagefolder" and ImageFolder indices. Every line is bounded
// (MaxAnnounceLine), and so is the order's length.
func (sm Samples) read(r io.Reader) ([]uint32, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	limit := MaxAnnounceFactor * max(sm.N, 1)
	var order []uint32
	imagefolder := false
	for n := 1; ; n++ {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(line) > MaxAnnounceLine+1 || len(line) > MaxAnnounceLine && line[len(line)-1] != '\n' {
			return nil, fmt.Errorf("line %d is longer than %d bytes: %w", n, MaxAnnounceLine, ErrBadInput)
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("reading line %d: %w", n, err)
		}
		if t := bytes.TrimSpace(line); len(t) > 0 {
			switch {
			case n == 1 && string(t) == "imagefolder":
				imagefolder = true
			case len(order) >= limit:
				return nil, fmt.Errorf("line %d: an order may hold at most %d samples (%d× the beton's %d): %w", n, limit, MaxAnnounceFactor, sm.N, ErrBadInput)
			default:
				s, perr := sm.parse(t, n, imagefolder)
				if perr != nil {
					return nil, perr
				}
				order = append(order, uint32(s))
			}
		}
		if err == io.EOF {
			return order, nil
		}
	}
}

// parseSample reads line number n: a sample id, or an ImageFolder index
// when imagefolder is set.
func (sm Samples) parse(line []byte, n int, imagefolder bool) (int, error) {
	k, err := strconv.ParseInt(string(line), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("line %d: %q is not a number: %w", n, line, ErrBadInput)
	}
	if imagefolder {
		if k < 0 || k >= int64(len(sm.ImageFolder)) {
			return 0, fmt.Errorf("line %d: ImageFolder index %d out of range [0, %d): %w", n, k, len(sm.ImageFolder), ErrBadInput)
		}
		return int(sm.ImageFolder[k]), nil
	}
	if k < 0 || k >= int64(sm.N) {
		return 0, fmt.Errorf("line %d: sample %d out of range [0, %d): %w", n, k, sm.N, ErrBadInput)
	}
	return int(k), nil
}
