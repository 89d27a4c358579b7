package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/ffcvfs/ffcvfs/pagecache"
	"github.com/ffcvfs/ffcvfs/pipeline/order"
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
	_ = (gofs.NodeOpener)((*textNode)(nil))
	_ = (gofs.NodeGetattrer)((*textNode)(nil))
	_ = (gofs.NodeOpener)((*announceNode)(nil))
	_ = (gofs.NodeGetattrer)((*announceNode)(nil))
	_ = (gofs.NodeSetattrer)((*announceNode)(nil))
	_ = (gofs.FileReader)((*textHandle)(nil))
	_ = (gofs.FileWriter)((*announceHandle)(nil))
	_ = (gofs.FileFlusher)((*announceHandle)(nil))
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
	return 0
}

func (n *ctlNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return gofs.NewListDirStream([]fuse.DirEntry{
		{Name: "dataset.beton", Mode: syscall.S_IFREG, Ino: inoDataset},
		{Name: "stats.json", Mode: syscall.S_IFREG, Ino: inoStats},
		{Name: "announce", Mode: syscall.S_IFREG, Ino: inoAnnounce},
		{Name: "orders", Mode: syscall.S_IFDIR, Ino: inoOrders},
	}), 0
}

func (n *ctlNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	v := n.v
	var node gofs.InodeEmbedder
	var ino uint64
	switch name {
	case "dataset.beton":
		ino = inoDataset
		v.fileAttr(&out.Attr, ino, 0o444, v.f.Size())
		node = &datasetNode{v: v}
	case "stats.json":
		ino = inoStats
		v.fileAttr(&out.Attr, ino, 0o444, 0)
		node = &textNode{v: v, ino: ino, gen: v.statsJSON}
		out.SetEntryTimeout(v.opts.Timeout)
		return n.NewInode(ctx, node, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0 // attributes: no timeout
	case "announce":
		ino = inoAnnounce
		v.fileAttr(&out.Attr, ino, 0o600, 0)
		node = &announceNode{v: v}
	case "orders":
		ino = inoOrders
		v.dirAttr(&out.Attr, ino, 0o555)
		node = &ordersNode{v: v, ino: ino}
	default:
		return nil, syscall.ENOENT
	}
	v.entry(out)
	mode := uint32(syscall.S_IFREG)
	if name == "orders" {
		mode = syscall.S_IFDIR
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
	return 0
}

func (n *datasetNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	return nil, n.v.openFlags(), 0
}

func (n *datasetNode) Read(ctx context.Context, f gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	v := n.v
	k, err := v.cache.ReadAt(ctx, dest, off)
	if err != nil && k < len(dest) && off+int64(k) < v.f.Size() {
		return nil, v.readError("read of dataset.beton", err)
	}
	v.reads.beton.Add(1)
	v.reads.betonBytes.Add(uint64(k))
	return fuse.ReadResultData(dest[:k]), 0
}

// textNode is a read-only file whose content is made when it is opened.
type textNode struct {
	gofs.Inode
	readOnlyFile
	v   *View
	ino uint64
	gen func(ctx context.Context) ([]byte, error)
}

func (n *textNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	size := 0
	if h, ok := f.(*textHandle); ok {
		size = len(h.data)
	}
	n.v.fileAttr(&out.Attr, n.ino, 0o444, int64(size))
	return 0
}

func (n *textNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	data, err := n.gen(ctx)
	if err != nil {
		return nil, 0, n.v.errs.toErrno("open", err)
	}
	// Direct I/O: the size in stat (0 before opening) must not cut reads.
	return &textHandle{data: data}, fuse.FOPEN_DIRECT_IO, 0
}

type textHandle struct{ data []byte }

func (h *textHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= int64(len(h.data)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(h.data[off:min(int64(len(h.data)), off+int64(len(dest)))]), 0
}

// Stats is what stats.json holds.
type Stats struct {
	Cache pagecache.Stats `json:"cache"`
	Reads struct {
		JPG        uint64 `json:"jpg"`
		JPGBytes   uint64 `json:"jpg_bytes"`
		PPM        uint64 `json:"ppm"`
		PPMBytes   uint64 `json:"ppm_bytes"`
		Beton      uint64 `json:"dataset_beton"`
		BetonBytes uint64 `json:"dataset_beton_bytes"`
		// Errors counts lookups and reads answered with an error, EIO
		// mostly; not those interrupted, which the kernel restarts.
		Errors uint64 `json:"errors"`
	} `json:"reads"`
	Samples  int   `json:"samples"`
	Classes  int   `json:"classes"`
	Pages    int   `json:"pages"`
	PageSize int64 `json:"page_size"`
	// DataBytes is the size of the data pages, the dataset's share of
	// what is read from storage.
	DataBytes int64 `json:"data_bytes"`
	// Announced counts the orders announced through .ffcvfs/announce.
	// A plan leaves cache.plans once every sample of it has been read, so
	// this is how a finished announcement shows.
	Announced uint64 `json:"announced"`
}

// Stats returns the view's statistics.
func (v *View) Stats() Stats {
	var s Stats
	s.Cache = v.cache.Stats()
	s.Reads.JPG, s.Reads.JPGBytes = v.reads.jpg.Load(), v.reads.jpgBytes.Load()
	s.Reads.PPM, s.Reads.PPMBytes = v.reads.ppm.Load(), v.reads.ppmBytes.Load()
	s.Reads.Beton, s.Reads.BetonBytes = v.reads.beton.Load(), v.reads.betonBytes.Load()
	s.Reads.Errors = v.reads.errors.Load()
	s.Samples, s.Classes, s.Pages, s.PageSize = v.f.NumSamples(), len(v.classes), v.f.NumPages(), v.f.PageSize()
	s.DataBytes = int64(v.f.NumPages()) * v.f.PageSize()
	s.Announced = v.announced.Load()
	return s
}

func (v *View) statsJSON(ctx context.Context) ([]byte, error) {
	b, err := json.MarshalIndent(v.Stats(), "", "  ")
	return append(b, '\n'), err
}

// announceNode is .ffcvfs/announce: writing an order announces it as the
// writing process's plan.
type announceNode struct {
	gofs.Inode
	v *View
}

func (n *announceNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.fileAttr(&out.Attr, inoAnnounce, 0o600, 0)
	return 0
}

// Setattr accepts the truncation that opening with O_TRUNC asks for.
func (n *announceNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok && sz != 0 {
		return syscall.EINVAL
	}
	n.v.fileAttr(&out.Attr, inoAnnounce, 0o600, 0)
	return 0
}

func (n *announceNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	caller, ok := fuse.FromContext(ctx)
	if !ok || caller.Uid != n.v.opts.Owner && caller.Uid != 0 {
		return nil, 0, syscall.EACCES
	}
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	return &announceHandle{v: n.v, pid: caller.Pid}, fuse.FOPEN_DIRECT_IO, 0
}

type announceHandle struct {
	v   *View
	pid uint32
	mu  sync.Mutex
	buf bytes.Buffer
}

func (h *announceHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if off != int64(h.buf.Len()) {
		return 0, syscall.EINVAL // written in one go, front to back
	}
	h.buf.Write(data)
	return uint32(len(data)), 0
}

// Flush announces what was written (at close).
func (h *announceHandle) Flush(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.buf.Len() == 0 {
		return 0
	}
	order, err := h.v.parseOrder(h.buf.Bytes())
	h.buf.Reset()
	if err == nil {
		err = h.v.cache.Announce(fmt.Sprintf("announce:pid-%d", h.pid), order)
	}
	if err != nil {
		return h.v.errs.toErrno("announce", err)
	}
	h.v.announced.Add(1)
	return 0
}

// parseOrder reads an announced order: sample ids one per line, or a first
// line "imagefolder" and then ImageFolder indices.
func (v *View) parseOrder(text []byte) ([]uint32, error) {
	lines := strings.Split(strings.TrimSpace(string(text)), "\n")
	imagefolder := false
	if len(lines) > 0 && strings.TrimSpace(lines[0]) == "imagefolder" {
		imagefolder = true
		lines = lines[1:]
	}
	order := make([]uint32, 0, len(lines))
	for i, line := range lines {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		n, err := strconv.Atoi(line)
		if err != nil {
			return nil, fmt.Errorf("announce: line %d: %q is not a number: %w", i+1, line, errBadInput)
		}
		if imagefolder {
			s, ok := v.SampleOf(n)
			if !ok {
				return nil, fmt.Errorf("announce: line %d: ImageFolder index %d out of range [0, %d): %w", i+1, n, len(v.ifIndex), errBadInput)
			}
			n = s
		} else if n < 0 || n >= v.f.NumSamples() {
			return nil, fmt.Errorf("announce: line %d: sample %d out of range [0, %d): %w", i+1, n, v.f.NumSamples(), errBadInput)
		}
		order = append(order, uint32(n))
	}
	return order, nil
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
}

func (n *ordersNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.dirAttr(&out.Attr, n.ino, 0o555)
	return 0
}

var rankRE = regexp.MustCompile(`^([0-9]+)-of-([0-9]+)$`)

func (n *ordersNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	v := n.v
	child := &ordersNode{v: v, ino: inoDynamic, kind: n.kind, seed: n.seed, depth: n.depth + 1, rank: n.rank, world: n.world}
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
		child.rank, _ = strconv.Atoi(m[1])
		child.world, _ = strconv.Atoi(m[2])
		if child.world < 1 || child.rank >= child.world {
			return nil, syscall.ENOENT
		}
	case n.depth >= 2 && numErr == nil:
		// An EPOCH file.
		o := order.Options{Kind: n.kind, Seed: n.seed, Epoch: num, Rank: n.rank, WorldSize: max(1, n.world), BatchSize: v.opts.OrderBatchSize}
		file := &textNode{v: v, ino: inoDynamic, gen: func(ctx context.Context) ([]byte, error) { return v.orderText(o) }}
		v.fileAttr(&out.Attr, inoDynamic, 0o444, 0)
		out.SetAttrTimeout(0)
		return n.NewInode(ctx, file, gofs.StableAttr{Mode: syscall.S_IFREG}), 0
	default:
		return nil, syscall.ENOENT
	}
	v.dirAttr(&out.Attr, inoDynamic, 0o555)
	v.entry(out)
	return n.NewInode(ctx, child, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

// orderText generates an order, announces it (replacing the plan of the
// same kind, seed and rank from an earlier epoch), and returns it as
// ImageFolder indices, one per line.
func (v *View) orderText(o order.Options) ([]byte, error) {
	ids, err := order.Generate(v.f, o)
	if err != nil {
		return nil, fmt.Errorf("order: %v: %w", err, errBadInput)
	}
	if err := v.cache.Announce(fmt.Sprintf("order:%s/%d/%d-of-%d", o.Kind, o.Seed, o.Rank, o.WorldSize), ids); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(len(ids) * 8)
	for _, s := range ids {
		i := v.ifOf[s]
		if i < 0 {
			continue // a sample no class folder serves
		}
		b.WriteString(strconv.Itoa(int(i)))
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}
