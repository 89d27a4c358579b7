package fs

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/jpeg"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Inode numbers: fixed ones for the root and the control files, then one
// range for class folders and one for sample files.
const (
	inoRoot     = 1
	inoCtl      = 2
	inoDataset  = 3
	inoStats    = 4
	inoAnnounce = 5
	inoOrders   = 6
	inoDynamic  = 1 << 20 // orders/ subfolders and files
	inoClass    = 1 << 40
	inoSample   = 1 << 48
)

var (
	_ = (gofs.NodeLookuper)((*rootNode)(nil))
	_ = (gofs.NodeReaddirer)((*rootNode)(nil))
	_ = (gofs.NodeGetattrer)((*rootNode)(nil))
	_ = (gofs.NodeStatfser)((*rootNode)(nil))
	_ = (gofs.NodeLookuper)((*classNode)(nil))
	_ = (gofs.NodeReaddirer)((*classNode)(nil))
	_ = (gofs.NodeGetattrer)((*classNode)(nil))
	_ = (gofs.NodeOpener)((*sampleNode)(nil))
	_ = (gofs.NodeReader)((*sampleNode)(nil))
	_ = (gofs.NodeGetattrer)((*sampleNode)(nil))
)

// Root returns the root node of the view, to pass to go-fuse's Mount.
func (v *View) Root() gofs.InodeEmbedder { return &rootNode{v: v} }

func (v *View) dirAttr(out *fuse.Attr, ino uint64, mode uint32) {
	out.Ino = ino
	out.Mode = syscall.S_IFDIR | mode
	out.Nlink = 2
	v.times(out)
}

// fileBlksize is the st_blksize of every file, a local disk's. Programs size
// their buffers by it: CPython's open() gives each file a buffer of
// st_blksize bytes, so 1 MiB here cost a DataLoader worker a fresh 1 MiB
// allocation, and its page faults, for every image it opened. It does not
// set the size of the kernel's READs (read-ahead does).
const fileBlksize = 4096

func (v *View) fileAttr(out *fuse.Attr, ino uint64, mode uint32, size int64) {
	out.Ino = ino
	out.Mode = syscall.S_IFREG | mode
	out.Nlink = 1
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	out.Blksize = fileBlksize
	v.times(out)
}

func (v *View) linkAttr(out *fuse.Attr, ino uint64, target string) {
	out.Ino = ino
	out.Mode = syscall.S_IFLNK | 0o777
	out.Nlink = 1
	out.Size = uint64(len(target))
	v.times(out)
}

func (v *View) times(out *fuse.Attr) {
	t := v.opts.Mtime
	out.SetTimes(&t, &t, &t)
	out.Uid = v.opts.Owner
	out.Gid = v.gid
}

// entry sets the timeouts of a lookup reply: nothing ever changes.
func (v *View) entry(out *fuse.EntryOut) {
	out.SetEntryTimeout(v.opts.Timeout)
	out.SetAttrTimeout(v.opts.Timeout)
}

type rootNode struct {
	gofs.Inode
	readOnlyDir
	v *View
}

func (n *rootNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.dirAttr(&out.Attr, inoRoot, 0o555)
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *rootNode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize = 4096
	out.Frsize = 4096
	out.Blocks = uint64(n.v.f.Size()+4095) / 4096
	out.Files = uint64(n.v.f.NumSamples())
	out.NameLen = 255
	return 0
}

// Readdir lists the class folders, never the control folder.
func (n *rootNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	if n.v.named != nil {
		return namedList(n.v.named, 0), 0
	}
	list := make([]fuse.DirEntry, len(n.v.classes))
	for i, name := range n.v.classes {
		list[i] = fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: inoClass + uint64(i)}
	}
	return gofs.NewListDirStream(list), 0
}

func (n *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	v := n.v
	if name == control.Dir {
		v.dirAttr(&out.Attr, inoCtl, 0o555)
		v.entry(out)
		return n.NewInode(ctx, &ctlNode{v: v}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: inoCtl}), 0
	}
	if v.named != nil {
		return namedLookup(ctx, &n.Inode, v, 0, name, out)
	}
	// Class names sort like ImageFolder's classes: binary search.
	lo, hi := 0, len(v.classes)
	for lo < hi {
		m := (lo + hi) / 2
		if v.classes[m] < name {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(v.classes) || v.classes[lo] != name {
		return nil, syscall.ENOENT
	}
	ino := inoClass + uint64(lo)
	v.dirAttr(&out.Attr, ino, 0o555)
	v.entry(out)
	return n.NewInode(ctx, &classNode{v: v, class: lo}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino}), 0
}

type classNode struct {
	gofs.Inode
	readOnlyDir
	v     *View
	class int
}

func (n *classNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.dirAttr(&out.Attr, inoClass+uint64(n.class), 0o555)
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *classNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	members := n.v.members[n.class]
	list := make([]fuse.DirEntry, len(members))
	for i, s := range members {
		list[i] = fuse.DirEntry{Name: n.v.SampleName(int(s)), Mode: syscall.S_IFREG, Ino: inoSample + uint64(s)}
	}
	return gofs.NewListDirStream(list), 0
}

func (n *classNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	v := n.v
	stem, _, ok := strings.Cut(name, ".")
	if !ok {
		return nil, syscall.ENOENT
	}
	s, err := strconv.Atoi(stem)
	if err != nil || s < 0 || s >= v.f.NumSamples() || int(v.classIdx[s]) != n.class || v.SampleName(s) != name {
		return nil, syscall.ENOENT
	}
	return v.sampleEntry(ctx, &n.Inode, s, out)
}

// sampleEntry answers the lookup of sample s's file in parent.
func (v *View) sampleEntry(ctx context.Context, parent *gofs.Inode, s int, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	size, _, err := v.sampleSize(s)
	if err != nil {
		return nil, v.readError(fmt.Sprintf("lookup of sample %d", s), err)
	}
	v.fileAttr(&out.Attr, inoSample+uint64(s), 0o444, size)
	v.entry(out)
	return parent.NewInode(ctx, &sampleNode{v: v, sample: s, size: size}, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: inoSample + uint64(s)}), 0
}

type sampleNode struct {
	gofs.Inode
	readOnlyFile
	v      *View
	sample int
	size   int64
}

func (n *sampleNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.fileAttr(&out.Attr, inoSample+uint64(n.sample), 0o444, n.size)
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *sampleNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return n.v.open(flags, false)
}

// open answers OPEN for every file the mount serves. By default (zero-
// message opens, see Compat) it answers ENOSYS, upon which the kernel stops
// sending OPEN and RELEASE and reads every file through its page cache; the
// copies it keeps are bounded by invalidation (kernelCopies) unless
// --kernel-cache, and node methods refuse writes, since the kernel no
// longer asks before opening for writing. On a kernel without them (or
// with Compat.Opens) the file is read with direct I/O, so that the cache's
// budget is the memory used and the cache sees every read, or through the
// kernel's page cache, kept across opens since files never change, with
// --kernel-cache (and for files made whole at lookup, which never change
// either). No FLUSH is asked for at close: nothing needs one.
func (v *View) open(flags uint32, writable bool) (gofs.FileHandle, uint32, syscall.Errno) {
	return v.openCached(flags, writable, v.opts.KernelCache)
}

// openCached is open, with cached telling whether the kernel may cache the
// file's content.
func (v *View) openCached(flags uint32, writable, cached bool) (gofs.FileHandle, uint32, syscall.Errno) {
	if v.noOpen.Load() {
		return nil, 0, syscall.ENOSYS
	}
	if !writable && flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	out := uint32(fuse.FOPEN_DIRECT_IO)
	if cached {
		out = fuse.FOPEN_KEEP_CACHE
	}
	if !v.opts.Compat.Flush {
		out |= fuse.FOPEN_NOFLUSH
	}
	return nil, out, 0
}

// Read copies the requested range of the sample's file out of its page,
// pinned for the copy. The kernel caches what it reads; that copy is
// recorded before the page is released, so that evicting the page drops
// it too (kernelCopies).
func (n *sampleNode) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	v := n.v
	if off >= n.size {
		return fuse.ReadResultData(nil), 0
	}
	_, img, err := v.sampleSize(n.sample)
	if err != nil {
		return nil, v.readError("read", err)
	}
	if off == 0 {
		v.reads.images.Add(1)
	}
	pg, err := v.cache.AcquireSample(ctx, n.sample)
	if err != nil {
		return nil, v.readError("read of sample "+strconv.Itoa(n.sample), err)
	}
	defer pg.Release()
	data := pg.Data[int64(img.Ptr)-pg.Off:][:img.Size]
	if off == 0 && img.Mode == beton.ModeJPEG {
		v.reads.jpgImages.Add(1)
		if jpeg.HasCropRestarts(data) {
			v.reads.restarts.Add(1)
		}
	}
	k := 0
	if img.Mode == beton.ModeRaw {
		hdr := ppmHeader(img.Width, img.Height)
		if off < int64(len(hdr)) {
			k = copy(dest, hdr[off:])
			off = 0
		} else {
			off -= int64(len(hdr))
		}
		v.reads.ppm.Add(1)
	} else {
		v.reads.jpg.Add(1)
	}
	k += copy(dest[k:], data[off:])
	if img.Mode == beton.ModeRaw {
		v.reads.ppmBytes.Add(uint64(k))
	} else {
		v.reads.jpgBytes.Add(uint64(k))
	}
	v.kcopies.sampleRead(n.sample, &n.Inode, n.size)
	return fuse.ReadResultData(dest[:k]), 0
}
