package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"syscall"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/order"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	_ = (gofs.NodeLookuper)((*ctlNode)(nil))
	_ = (gofs.NodeReaddirer)((*ctlNode)(nil))
	_ = (gofs.NodeGetattrer)((*ctlNode)(nil))
	_ = (gofs.NodeOpener)((*datasetNode)(nil))
	_ = (gofs.NodeReader)((*datasetNode)(nil))
	_ = (gofs.NodeGetattrer)((*datasetNode)(nil))
	_ = (gofs.NodeOpener)((*snapshotNode)(nil))
	_ = (gofs.NodeReader)((*snapshotNode)(nil))
	_ = (gofs.NodeGetattrer)((*snapshotNode)(nil))
	_ = (gofs.NodeGetattrer)((*announceLink)(nil))
	_ = (gofs.NodeLookuper)((*ordersNode)(nil))
	_ = (gofs.NodeGetattrer)((*ordersNode)(nil))
)

// ctlNode is the .ffcvfs folder.
type ctlNode struct {
	gofs.Inode
	readOnlyDir
	v *View
}

func (n *ctlNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.dirAttr(&out.Attr, inoCtl, 0o555)
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *ctlNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream([]fuse.DirEntry{
		{Name: control.DatasetFile, Mode: syscall.S_IFREG, Ino: inoDataset},
		{Name: control.StatsFile, Mode: syscall.S_IFREG, Ino: inoStats},
		{Name: control.AnnounceFile, Mode: syscall.S_IFLNK, Ino: inoAnnounce},
		{Name: control.OrdersDir, Mode: syscall.S_IFDIR, Ino: inoOrders},
	}), 0
}

func (n *ctlNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	v := n.v
	var node gofs.InodeEmbedder
	var ino uint64
	switch name {
	case control.DatasetFile:
		ino = inoDataset
		v.fileAttr(&out.Attr, ino, 0o444, v.f.Size())
		node = &datasetNode{v: v}
	case control.StatsFile:
		return v.snapshot(ctx, &n.Inode, out, v.statsJSON)
	case control.AnnounceFile:
		ino = inoAnnounce
		v.linkAttr(&out.Attr, ino, v.announcer.Path())
		node = &announceLink{v: v}
	case control.OrdersDir:
		ino = inoOrders
		v.dirAttr(&out.Attr, ino, 0o555)
		node = &ordersNode{v: v, ino: ino}
	default:
		return nil, syscall.ENOENT
	}
	v.entry(out)
	mode := uint32(syscall.S_IFREG)
	switch name {
	case control.OrdersDir:
		mode = syscall.S_IFDIR
	case control.AnnounceFile:
		mode = syscall.S_IFLNK
	}
	return n.NewInode(ctx, node, gofs.StableAttr{Mode: mode, Ino: ino}), 0
}

// datasetNode is .ffcvfs/dataset.beton: the whole file, through the cache.
type datasetNode struct {
	gofs.Inode
	readOnlyFile
	v *View
}

func (n *datasetNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.fileAttr(&out.Attr, inoDataset, 0o444, n.v.f.Size())
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *datasetNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return n.v.open(flags, false)
}

// Read serves a range of the beton. Ranges of data pages go through the
// kernel's page cache like sample files, and are invalidated with their
// page (kernelCopies); a page-cache-backed file can also be mapped.
func (n *datasetNode) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	v := n.v
	k, err := v.cache.ReadAt(ctx, dest, off)
	if err != nil && k < len(dest) && off+int64(k) < v.f.Size() {
		return nil, v.readError("read of dataset.beton", err)
	}
	v.reads.beton.Add(1)
	v.reads.betonBytes.Add(uint64(k))
	if k > 0 {
		ps := v.f.PageSize()
		first, last := off/ps, (off+int64(k)-1)/ps
		for p := max(first, v.f.FirstPage()); p <= last && p < v.f.FirstPage()+int64(v.f.NumPages()); p++ {
			v.kcopies.datasetRead(p, &n.Inode)
		}
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// snapshotNode is a read-only file whose content is made when it is looked
// up: stats.json and the order files. Each lookup makes a new inode, and
// the entry is never cached, so every open of the path finds fresh content,
// while a file already open keeps reading the snapshot it was opened on:
// the content of an inode never changes, so the kernel may cache it like
// any other file's, also without OPEN.
type snapshotNode struct {
	gofs.Inode
	readOnlyFile
	v    *View
	data []byte
}

// snapshot answers a lookup with a new snapshotNode holding gen's output.
func (v *View) snapshot(ctx context.Context, parent *gofs.Inode, out *fuse.EntryOut, gen func(ctx context.Context) ([]byte, error)) (*gofs.Inode, syscall.Errno) {
	data, err := gen(ctx)
	if err != nil {
		return nil, v.errs.toErrno("lookup", err)
	}
	node := &snapshotNode{v: v, data: data}
	ch := parent.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG})
	v.fileAttr(&out.Attr, ch.StableAttr().Ino, 0o444, int64(len(data)))
	out.SetEntryTimeout(0)
	out.SetAttrTimeout(v.opts.Timeout)
	return ch, 0
}

func (n *snapshotNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.fileAttr(&out.Attr, n.StableAttr().Ino, 0o444, int64(len(n.data)))
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *snapshotNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	return n.v.openCached(flags, false, true)
}

func (n *snapshotNode) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(n.data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(n.data[off:min(int64(len(n.data)), off+int64(len(dest)))]), 0
}

// Stats returns the view's statistics.
func (v *View) Stats() control.Stats {
	s := v.viewStats()
	s.Cache = v.cache.Stats()
	s.Peers = s.Cache.Peers
	return s
}

// viewStats returns the view's own statistics: Stats without Cache (and
// without what the cache read through the peer tier).
func (v *View) viewStats() control.Stats {
	var s control.Stats
	s.Reads.Images = v.reads.images.Load()
	s.Reads.JPGImages, s.Reads.JPGRestarts = v.reads.jpgImages.Load(), v.reads.restarts.Load()
	s.Reads.JPG, s.Reads.JPGBytes = v.reads.jpg.Load(), v.reads.jpgBytes.Load()
	s.Reads.PPM, s.Reads.PPMBytes = v.reads.ppm.Load(), v.reads.ppmBytes.Load()
	s.Reads.Beton, s.Reads.BetonBytes = v.reads.beton.Load(), v.reads.betonBytes.Load()
	s.Reads.Errors = v.reads.errors.Load() + v.announcer.Errors()
	s.FUSE.Requests = v.requests.Map()
	s.FUSE.KernelProtocol = v.protocol
	s.FUSE.NoOpen = v.noOpen.Load()
	s.FUSE.NoFlush = !v.opts.Compat.Flush
	s.FUSE.KernelCacheBytes = v.kcopies.Bytes()
	s.FUSE.Invalidations = v.kcopies.Invalidations()
	s.FUSE.GOMAXPROCS = runtime.GOMAXPROCS(0)
	s.Source = v.f.Name()
	s.Samples, s.Classes, s.Pages, s.PageSize = v.f.NumSamples(), len(v.classes), v.f.NumPages(), v.f.PageSize()
	s.DataBytes = int64(v.f.NumPages()) * v.f.PageSize()
	s.Announced = v.announcer.Announced()
	s.PlanOwners = v.leases.Owners()
	return s
}

func (v *View) statsJSON(ctx context.Context) ([]byte, error) {
	b, err := json.MarshalIndent(v.Stats(), "", "  ")
	return append(b, '\n'), err
}

// ordersNode is a folder of orders/: orders, orders/KIND, orders/KIND/SEED
// and orders/KIND/SEED/RANK-of-WORLD. Its files are EPOCH numbers.
type ordersNode struct {
	gofs.Inode
	readOnlyDir
	v           *View
	ino         uint64
	kind        order.Kind
	seed        uint64
	depth       int // 0 orders, 1 KIND, 2 SEED, 3 RANK-of-WORLD
	rank, world int
	nodes       int     // node-affine: the nodes, or 0
	move        float64 // node-affine: the share of a node's pages moving per epoch
}

func (n *ordersNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.dirAttr(&out.Attr, n.ino, 0o555)
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

var (
	// rankRE is RANK-of-WORLD, and for a node-affine order
	// RANK-of-WORLD.nodes-N[.move-F].
	rankRE = regexp.MustCompile(`^([0-9]+)-of-([0-9]+)(?:\.nodes-([0-9]+)(?:\.move-(0|1|0?\.[0-9]{1,6}))?)?$`)
	// fromRE is an EPOCH file resumed at a position: EPOCH.from-POS.
	fromRE = regexp.MustCompile(`^([0-9]+)\.from-([0-9]+)$`)
	// resumeRE is the rest of an epoch after segments read at other world
	// sizes: EPOCH.resume-WxP[-WxP...] (order.ParseSegments).
	resumeRE = regexp.MustCompile(`^([0-9]+)\.resume-([0-9x-]+)$`)
)

func (n *ordersNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	v := n.v
	child := &ordersNode{v: v, ino: inoDynamic, kind: n.kind, seed: n.seed, depth: n.depth + 1, rank: n.rank, world: n.world, nodes: n.nodes, move: n.move}
	num, numErr := strconv.ParseUint(name, 10, 64)
	switch {
	case n.depth == 0:
		k, err := order.ParseKind(name)
		if err != nil {
			return nil, syscall.ENOENT
		}
		child.kind = k
	case n.depth == 1 && numErr == nil:
		child.seed = num
	case n.depth == 2 && rankRE.MatchString(name):
		m := rankRE.FindStringSubmatch(name)
		rank, err1 := strconv.ParseUint(m[1], 10, 32)
		world, err2 := strconv.ParseUint(m[2], 10, 32)
		if err1 != nil || err2 != nil || world > order.MaxWorldSize {
			return nil, v.errs.toErrno("orders", fmt.Errorf("orders/%s/%d/%s: the world size must be 1 to %d: %w", n.kind, n.seed, name, order.MaxWorldSize, errBadInput))
		}
		child.rank, child.world = int(rank), int(world)
		if child.world < 1 || child.rank >= child.world {
			return nil, syscall.ENOENT
		}
		if m[3] != "" {
			nodes, err := strconv.ParseUint(m[3], 10, 32)
			if err != nil || nodes < 1 || nodes > world || world%nodes != 0 {
				return nil, v.errs.toErrno("orders", fmt.Errorf("orders/%s/%d/%s: the nodes must divide the world size %d: %w", n.kind, n.seed, name, world, errBadInput))
			}
			child.nodes = int(nodes)
			if m[4] != "" {
				if child.move, err = strconv.ParseFloat(m[4], 64); err != nil || child.move > 1 {
					return nil, v.errs.toErrno("orders", fmt.Errorf("orders/%s/%d/%s: the move fraction must be 0 to 1: %w", n.kind, n.seed, name, errBadInput))
				}
			}
		}
	case n.depth >= 2 && (numErr == nil || fromRE.MatchString(name) || resumeRE.MatchString(name)):
		// An EPOCH file, EPOCH.from-POS or EPOCH.resume-SEGMENTS: made,
		// and announced, at every lookup.
		from := uint64(0)
		var resumed []order.Segment
		if m := fromRE.FindStringSubmatch(name); m != nil {
			var err1, err2 error
			num, err1 = strconv.ParseUint(m[1], 10, 64)
			from, err2 = strconv.ParseUint(m[2], 10, 32)
			if err1 != nil || err2 != nil {
				return nil, syscall.ENOENT
			}
		}
		if m := resumeRE.FindStringSubmatch(name); m != nil {
			var err error
			if num, err = strconv.ParseUint(m[1], 10, 64); err != nil {
				return nil, syscall.ENOENT
			}
			if resumed, err = order.ParseSegments(m[2], "-"); err != nil {
				return nil, v.errs.toErrno("orders", fmt.Errorf("orders/%s/%d/.../%s: %v: %w", n.kind, n.seed, name, err, errBadInput))
			}
		}
		o := order.Options{Kind: n.kind, Seed: n.seed, Epoch: num, Rank: n.rank, WorldSize: max(1, n.world), BatchSize: v.opts.OrderBatchSize,
			Resumed: resumed, Served: v.served, Nodes: n.nodes, MoveFraction: n.move}
		return v.snapshot(ctx, &n.Inode, out, func(ctx context.Context) ([]byte, error) { return v.orderText(ctx, o, int(from)) })
	default:
		return nil, syscall.ENOENT
	}
	v.dirAttr(&out.Attr, inoDynamic, 0o555)
	v.entry(out)
	return n.NewInode(ctx, child, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// served reports whether the tree has a file for sample id: the positions
// of a resumed order count the lines of order files, which are those.
func (v *View) served(id uint32) bool { return int(id) < len(v.ifOf) && v.ifOf[id] >= 0 }

// orderText generates an order, announces it (replacing the plan of the
// same kind, seed and rank from an earlier epoch) on behalf of the process
// that looked it up, and returns it as ImageFolder indices, one per line.
// With from > 0 (a resumed epoch), the first from lines are left out, and
// only the rest is announced.
func (v *View) orderText(ctx context.Context, o order.Options, from int) ([]byte, error) {
	all, err := order.GenerateContext(ctx, v.f, o)
	if err != nil {
		return nil, fmt.Errorf("order: %v: %w", err, errBadInput)
	}
	// The samples no class folder serves are no lines of the file.
	ids := all[:0:0]
	for _, s := range all {
		if v.ifOf[s] >= 0 {
			ids = append(ids, s)
		}
	}
	if from > len(ids) {
		return nil, fmt.Errorf("order %s/%d epoch %d: cannot resume at position %d: the epoch has %d samples: %w", o.Kind, o.Seed, o.Epoch, from, len(ids), errBadInput)
	}
	ids = ids[from:]
	// A plan's id names the user who announced it, so that one user's
	// orders never replace another's (with --allow-other).
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return nil, fmt.Errorf("order %s/%d epoch %d: no caller: %w", o.Kind, o.Seed, o.Epoch, errBadInput)
	}
	id := fmt.Sprintf("order:uid-%d:%s/%d/%d-of-%d", caller.Uid, o.Kind, o.Seed, o.Rank, o.WorldSize)
	if err := v.leases.Announce(caller.Uid, caller.Pid, id, ids); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(len(ids) * 8)
	for _, s := range ids {
		b.WriteString(strconv.Itoa(int(v.ifOf[s])))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

var _ = (gofs.NodeReadlinker)((*announceLink)(nil))

// announceLink is .ffcvfs/announce: a symlink to the announce socket.
type announceLink struct {
	gofs.Inode
	readOnlyFile
	v *View
}

func (n *announceLink) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	return []byte(n.v.announcer.Path()), 0
}

func (n *announceLink) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.linkAttr(&out.Attr, inoAnnounce, n.v.announcer.Path())
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}
