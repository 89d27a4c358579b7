package fs

import (
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Opcodes counted in stats.json (fuse.requests), by the names the kernel's
// FUSE protocol gives them, lower-cased. Each is one request from the
// kernel and one reply from the server (FORGET gets none), so their sum is
// the mount's round trips.
const (
	opLookup = iota
	opForget
	opGetattr
	opSetattr
	opAccess
	opOpen
	opRead
	opWrite
	opFlush
	opRelease
	opIoctl
	opOpendir
	opReaddir
	opReaddirplus
	opReleasedir
	opStatfs
	opGetxattr
	opListxattr
	opLseek
	opStatx
	numOps
)

var opNames = [numOps]string{
	opLookup: "lookup", opForget: "forget", opGetattr: "getattr", opSetattr: "setattr",
	opAccess: "access", opOpen: "open", opRead: "read", opWrite: "write", opFlush: "flush",
	opRelease: "release", opIoctl: "ioctl", opOpendir: "opendir", opReaddir: "readdir",
	opReaddirplus: "readdirplus", opReleasedir: "releasedir", opStatfs: "statfs",
	opGetxattr: "getxattr", opListxattr: "listxattr", opLseek: "lseek", opStatx: "statx",
}

// requestCounts counts FUSE requests by opcode.
type requestCounts [numOps]atomic.Uint64

// Map returns the non-zero counts by opcode name.
func (c *requestCounts) Map() map[string]uint64 {
	m := map[string]uint64{}
	for i := range c {
		if n := c[i].Load(); n > 0 {
			m[opNames[i]] = n
		}
	}
	return m
}

// countingFS counts the requests that reach a RawFileSystem, then passes
// them on unchanged; with Options.RequestTimes it also times them. An
// atomic add per request (and, timed, two clock reads and a histogram's
// atomic adds): nothing on the hot path allocates or locks.
type countingFS struct {
	fuse.RawFileSystem
	v *View
}

var _ = (fuse.RawFileSystem)(countingFS{})

func (c countingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer c.v.observe(opLookup, c.v.begin(opLookup))
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

func (c countingFS) Forget(nodeid, nlookup uint64) {
	defer c.v.observe(opForget, c.v.begin(opForget))
	c.RawFileSystem.Forget(nodeid, nlookup)
}

func (c countingFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.v.observe(opGetattr, c.v.begin(opGetattr))
	return c.RawFileSystem.GetAttr(cancel, in, out)
}

func (c countingFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.v.observe(opSetattr, c.v.begin(opSetattr))
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c countingFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer c.v.observe(opAccess, c.v.begin(opAccess))
	return c.RawFileSystem.Access(cancel, in)
}

func (c countingFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.v.observe(opOpen, c.v.begin(opOpen))
	return c.RawFileSystem.Open(cancel, in, out)
}

func (c countingFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer c.v.observe(opRead, c.v.begin(opRead))
	return c.RawFileSystem.Read(cancel, in, buf)
}

func (c countingFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer c.v.observe(opWrite, c.v.begin(opWrite))
	return c.RawFileSystem.Write(cancel, in, data)
}

// Writev is how go-fuse delivers WRITE first; it falls back to Write only
// on ENOSYS, which the node bridge never answers, so a WRITE is counted once.
func (c countingFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	start := c.v.begin(-1)
	n, st := c.RawFileSystem.Writev(cancel, in, data)
	if st != fuse.ENOSYS {
		c.v.requests[opWrite].Add(1)
		c.v.observe(opWrite, start)
	}
	return n, st
}

func (c countingFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer c.v.observe(opFlush, c.v.begin(opFlush))
	if !c.v.opts.Compat.Flush {
		// No file needs one (announce takes its order as it is
		// written), and the kernel sends no more after ENOSYS.
		return fuse.ENOSYS
	}
	return c.RawFileSystem.Flush(cancel, in)
}

func (c countingFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer c.v.observe(opRelease, c.v.begin(opRelease))
	c.RawFileSystem.Release(cancel, in)
}

func (c countingFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer c.v.observe(opIoctl, c.v.begin(opIoctl))
	return c.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (c countingFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.v.observe(opOpendir, c.v.begin(opOpendir))
	return c.RawFileSystem.OpenDir(cancel, in, out)
}

func (c countingFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.v.observe(opReaddir, c.v.begin(opReaddir))
	return c.RawFileSystem.ReadDir(cancel, in, out)
}

func (c countingFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.v.observe(opReaddirplus, c.v.begin(opReaddirplus))
	return c.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (c countingFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer c.v.observe(opReleasedir, c.v.begin(opReleasedir))
	c.RawFileSystem.ReleaseDir(in)
}

func (c countingFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer c.v.observe(opStatfs, c.v.begin(opStatfs))
	return c.RawFileSystem.StatFs(cancel, h, out)
}

func (c countingFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer c.v.observe(opGetxattr, c.v.begin(opGetxattr))
	return c.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (c countingFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer c.v.observe(opListxattr, c.v.begin(opListxattr))
	return c.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (c countingFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer c.v.observe(opLseek, c.v.begin(opLseek))
	return c.RawFileSystem.Lseek(cancel, in, out)
}

func (c countingFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer c.v.observe(opStatx, c.v.begin(opStatx))
	return c.RawFileSystem.Statx(cancel, in, out)
}

// begin counts a request of opcode op (none if op < 0) and returns its
// start, or the zero time when requests are not timed.
func (v *View) begin(op int) time.Time {
	if op >= 0 {
		v.requests[op].Add(1)
	}
	if v.latency == nil {
		return time.Time{}
	}
	return time.Now()
}

// observe records the time since start of a request of opcode op, when
// requests are timed.
func (v *View) observe(op int, start time.Time) {
	if v.latency != nil && !start.IsZero() {
		v.latency[op].Observe(time.Since(start).Seconds())
	}
}
