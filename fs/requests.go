package fs

import (
	"sync/atomic"

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
// them on unchanged. An atomic add per request: nothing on the hot path
// allocates or locks.
type countingFS struct {
	fuse.RawFileSystem
	v *View
}

var _ = (fuse.RawFileSystem)(countingFS{})

func (c countingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	c.v.requests[opLookup].Add(1)
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

func (c countingFS) Forget(nodeid, nlookup uint64) {
	c.v.requests[opForget].Add(1)
	c.RawFileSystem.Forget(nodeid, nlookup)
}

func (c countingFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	c.v.requests[opGetattr].Add(1)
	return c.RawFileSystem.GetAttr(cancel, in, out)
}

func (c countingFS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	c.v.requests[opSetattr].Add(1)
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c countingFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	c.v.requests[opAccess].Add(1)
	return c.RawFileSystem.Access(cancel, in)
}

func (c countingFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c.v.requests[opOpen].Add(1)
	return c.RawFileSystem.Open(cancel, in, out)
}

func (c countingFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	c.v.requests[opRead].Add(1)
	return c.RawFileSystem.Read(cancel, in, buf)
}

func (c countingFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	c.v.requests[opWrite].Add(1)
	return c.RawFileSystem.Write(cancel, in, data)
}

// Writev is how go-fuse delivers WRITE first; it falls back to Write only
// on ENOSYS, which the node bridge never answers, so a WRITE is counted once.
func (c countingFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	n, st := c.RawFileSystem.Writev(cancel, in, data)
	if st != fuse.ENOSYS {
		c.v.requests[opWrite].Add(1)
	}
	return n, st
}

func (c countingFS) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	c.v.requests[opFlush].Add(1)
	if !c.v.opts.Compat.Flush {
		// No file needs one (announce takes its order as it is
		// written), and the kernel sends no more after ENOSYS.
		return fuse.ENOSYS
	}
	return c.RawFileSystem.Flush(cancel, in)
}

func (c countingFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	c.v.requests[opRelease].Add(1)
	c.RawFileSystem.Release(cancel, in)
}

func (c countingFS) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	c.v.requests[opIoctl].Add(1)
	return c.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (c countingFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c.v.requests[opOpendir].Add(1)
	return c.RawFileSystem.OpenDir(cancel, in, out)
}

func (c countingFS) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c.v.requests[opReaddir].Add(1)
	return c.RawFileSystem.ReadDir(cancel, in, out)
}

func (c countingFS) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c.v.requests[opReaddirplus].Add(1)
	return c.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (c countingFS) ReleaseDir(in *fuse.ReleaseIn) {
	c.v.requests[opReleasedir].Add(1)
	c.RawFileSystem.ReleaseDir(in)
}

func (c countingFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	c.v.requests[opStatfs].Add(1)
	return c.RawFileSystem.StatFs(cancel, h, out)
}

func (c countingFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	c.v.requests[opGetxattr].Add(1)
	return c.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (c countingFS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	c.v.requests[opListxattr].Add(1)
	return c.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (c countingFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	c.v.requests[opLseek].Add(1)
	return c.RawFileSystem.Lseek(cancel, in, out)
}

func (c countingFS) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	c.v.requests[opStatx].Add(1)
	return c.RawFileSystem.Statx(cancel, in, out)
}
