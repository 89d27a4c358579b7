// Package decoded is ffcvfeed's decoded-image tier: the JPEG samples of a
// beton held after entropy decoding and the inverse DCT, as their planes
// (package jpeg's Planes: Y, Cb and Cr in the JPEG's own sampling, at full
// resolution), so that epochs after the first make their crops without
// decoding the JPEG again.
//
// # What it holds, and for how long
//
// Every epoch reads each sample once, in another order: an LRU would
// evict each image just before its next use. The tier keeps a fixed set
// instead: the images it is offered while it has room, for the life of
// the process, and no more than its sizes — RAM (anonymous memory outside
// the Go heap, so that the collector neither scans nor doubles it,
// reserved at once and given memory as entries fill it) and,
// optionally, a file on a local disk. Nothing is ever evicted, so an
// entry once held stays valid and is read without a lock.
//
// Full resolution because the crops need it: RandomResizedCrop's default
// area fractions reach 8 % of an image, a side of about 110 pixels for an
// ImageNet-sized photo, which a 160- or 224-pixel output enlarges; a
// smaller DCT scale would serve only the larger crops.
//
// Uncompressed: the planes of photos shrink 2.0× with zstd at its fastest
// and 1.8× with S2 (klauspost/compress), but decompressing an image takes
// 1.4–3.5× as long as making its crop from the planes, about what decoding
// the JPEG's crop costs; a compressed hit would gain next to nothing over
// a miss (BenchmarkCompressedPlanes; docs/measurements.md#m-decoded).
//
// # Disk
//
// Entries past the RAM size go to one file, created in Options.Dir with
// mode 0600 and unlinked at once (it ends with the process), written
// once and read with a CRC-32C checked: an entry that fails it is a miss,
// counted, and the sample is decoded from its JPEG. A write that fails (a
// full disk) stops the disk's filling, logged once.
//
// # Concurrency
//
// A Tier is safe for concurrent use: Get reads published entries without
// a lock; Put takes a mutex to find an entry room, and copies its bytes
// outside it.
package decoded

import (
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/ffcvfs/ffcvfs/jpeg"
)

// Options says how much a Tier holds.
type Options struct {
	// RAM is the bytes of planes held in memory; Disk the bytes held in a
	// file in Dir (Dir is required when Disk > 0).
	RAM, Disk int64
	Dir       string
	// Samples is the number of samples of the beton: the ids Get and Put
	// take are below it.
	Samples int
	Logger  *slog.Logger
}

// MaxSize bounds Options.RAM and Options.Disk: 64 TiB.
const MaxSize = 1 << 46

// MaxSamples bounds Options.Samples (an entry pointer each).
const MaxSamples = 1 << 32

// chunk is the size of the anonymous mappings entries are placed in when
// the RAM size cannot be reserved at once; an entry larger than it has a
// mapping of its own.
const chunk = 64 << 20

// Stats are a Tier's figures.
type Stats struct {
	// Hits are images made from held planes; Misses JPEGs decoded while
	// the tier was on; Filled the images put in it.
	Hits, Misses, Filled uint64
	// NotHeld counts JPEGs not offered or not taken: a layout the planes
	// do not convert (jpeg.ErrNoPlanes), or no room left.
	NotHeld uint64
	// Corrupt counts disk entries whose checksum failed (each then a miss).
	Corrupt uint64
	// Bytes and images held, in RAM and on disk, and the sizes.
	RAMBytes, RAMImages, DiskBytes, DiskImages int64
	RAMSize, DiskSize                          int64
}

// Tier holds decoded images; see the package doc.
type Tier struct {
	opts    Options
	entries []atomic.Pointer[entry]
	log     *slog.Logger

	mu      sync.Mutex
	maps    [][]byte // the anonymous mappings
	mapped  int64    // their bytes
	free    []byte   // the rest of the last chunk
	disk    *os.File
	diskOff int64
	diskErr bool // a write failed: the disk takes no more
	full    bool // an image found no room (logged once)
	// left is the room the tier has, RAM and disk, kept under mu and read
	// without it (Full).
	left    atomic.Int64
	filling map[int]bool // samples whose room is taken, their bytes not yet in place

	hits, misses, filled, notHeld, corrupt     atomic.Uint64
	ramBytes, ramImages, diskBytes, diskImages atomic.Int64
}

type entry struct {
	p    jpeg.Planes
	data []byte // in RAM, or nil
	off  int64  // on disk
	sum  uint32 // CRC-32C of the bytes on disk
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// New returns a Tier of the sizes o gives.
func New(o Options) (*Tier, error) {
	switch {
	case o.RAM < 0 || o.RAM > MaxSize || o.Disk < 0 || o.Disk > MaxSize:
		return nil, fmt.Errorf("decoded-image cache: sizes %d (RAM) and %d (disk) bytes: each must be 0 to %d", o.RAM, o.Disk, int64(MaxSize))
	case o.Samples < 0 || int64(o.Samples) > MaxSamples:
		return nil, fmt.Errorf("decoded-image cache: %d samples: want 0 to %d", o.Samples, int64(MaxSamples))
	case o.Disk > 0 && o.Dir == "":
		return nil, errors.New("decoded-image cache: a disk size needs a folder (--decoded-cache-dir)")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	t := &Tier{opts: o, entries: make([]atomic.Pointer[entry], o.Samples), log: o.Logger}
	// The whole RAM size reserved at once (no memory is given to it until
	// an entry is written there), so that entries pack without gaps;
	// where the system refuses that, chunks are mapped as entries come.
	if o.RAM > 0 {
		if m, err := syscall.Mmap(-1, 0, int(o.RAM), syscall.PROT_READ|syscall.PROT_WRITE,
			syscall.MAP_PRIVATE|syscall.MAP_ANON|syscall.MAP_NORESERVE); err == nil {
			t.maps, t.mapped, t.free = [][]byte{m}, o.RAM, m
		}
	}
	if o.Disk > 0 {
		fi, err := os.Stat(o.Dir)
		if err != nil {
			return nil, fmt.Errorf("decoded-image cache folder: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("decoded-image cache folder %s is not a folder", o.Dir)
		}
		f, err := os.CreateTemp(o.Dir, ".ffcvfeed-decoded-*")
		if err != nil {
			return nil, fmt.Errorf("decoded-image cache: %w", err)
		}
		// Unlinked at once: the file ends with the process, whatever its end.
		if err := os.Remove(f.Name()); err != nil {
			f.Close()
			return nil, fmt.Errorf("decoded-image cache: %w", err)
		}
		t.disk = f
	}
	t.updateLeft()
	return t, nil
}

// updateLeft sets t.left to the room the tier has; t.mu is held (or the
// tier not yet shared).
func (t *Tier) updateLeft() {
	left := int64(len(t.free)) + t.opts.RAM - t.mapped
	if t.disk != nil && !t.diskErr {
		left += t.opts.Disk - t.diskOff
	}
	t.left.Store(left)
}

// Full reports, without a lock, that the tier would take no entry of n
// bytes or more: a caller that knows an image's planes take at least n
// bytes (its pixels: grayscale's, the least) need not read its header to
// offer it. The first time, the log says so.
func (t *Tier) Full(n int) bool {
	if t.left.Load() >= int64(n) {
		return false
	}
	t.mu.Lock()
	t.fullOnce(int64(n))
	t.mu.Unlock()
	return true
}

// Close returns the tier's memory and closes its file. No other method may
// be called after, nor may the data Get returned be used.
func (t *Tier) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.entries {
		t.entries[i].Store(nil)
	}
	var err error
	for _, m := range t.maps {
		err = errors.Join(err, syscall.Munmap(m))
	}
	t.maps, t.free, t.mapped = nil, nil, 0
	if t.disk != nil {
		err = errors.Join(err, t.disk.Close())
		t.disk = nil
	}
	return err
}

// Samples returns the number of samples the tier has room to index.
func (t *Tier) Samples() int { return len(t.entries) }

// Held reports whether sample s is held.
func (t *Tier) Held(s int) bool {
	return s >= 0 && s < len(t.entries) && t.entries[s].Load() != nil
}

// Get returns sample s's planes and their layout when held. Planes in RAM
// are returned as they are held (read-only); planes on disk are read into
// buf, grown as needed, and checked. A sample not held is a miss.
func (t *Tier) Get(s int, buf *[]byte) (jpeg.Planes, []byte, bool) {
	if s < 0 || s >= len(t.entries) {
		return jpeg.Planes{}, nil, false
	}
	e := t.entries[s].Load()
	if e == nil {
		t.misses.Add(1)
		return jpeg.Planes{}, nil, false
	}
	if e.data != nil {
		t.hits.Add(1)
		return e.p, e.data, true
	}
	n := e.p.Bytes()
	if cap(*buf) < n {
		*buf = make([]byte, n)
	}
	b := (*buf)[:n]
	if _, err := t.disk.ReadAt(b, e.off); err != nil || crc32.Checksum(b, castagnoli) != e.sum {
		// Dropped: the sample decodes from its JPEG from now on.
		if t.entries[s].CompareAndSwap(e, nil) {
			t.corrupt.Add(1)
			t.diskImages.Add(-1)
			t.log.Warn("a decoded image on disk is unreadable or damaged; decoding it from its JPEG", "sample", s, "err", err)
		}
		t.misses.Add(1)
		return jpeg.Planes{}, nil, false
	}
	t.hits.Add(1)
	return e.p, b, true
}

// Room reports whether an entry of n bytes would be taken now. The first
// time there is none, the log says so.
func (t *Tier) Room(n int) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.roomRAM(int64(n)) || t.roomDisk(int64(n)) {
		return true
	}
	t.fullOnce(int64(n))
	return false
}

// fullOnce logs, the first time, that an image of n bytes found no room;
// t.mu is held.
func (t *Tier) fullOnce(n int64) {
	if t.full {
		return
	}
	t.full = true
	t.log.Info("the decoded-image cache has no room for an image: the images it does not hold are decoded every epoch",
		"image_bytes", n, "images", t.ramImages.Load()+t.diskImages.Load(), "ram_bytes", t.ramBytes.Load(), "disk_bytes", t.diskBytes.Load())
}

func (t *Tier) roomRAM(n int64) bool {
	return int64(len(t.free)) >= n || t.opts.RAM-t.mapped >= n
}

func (t *Tier) roomDisk(n int64) bool {
	return t.disk != nil && !t.diskErr && t.diskOff+n <= t.opts.Disk
}

// NotHeld counts a JPEG the tier was not offered (a layout it does not
// hold).
func (t *Tier) NotHeld() { t.notHeld.Add(1) }

// Put holds a copy of sample s's planes, data, in RAM if there is room,
// else on disk if there is room there; it reports whether they are held.
// The room is taken under the tier's mutex, the bytes copied outside it.
func (t *Tier) Put(s int, p jpeg.Planes, data []byte) bool {
	n := p.Bytes()
	if s < 0 || s >= len(t.entries) || n <= 0 || len(data) < n {
		return false
	}
	data = data[:n]
	e := &entry{p: p, off: -1}
	t.mu.Lock()
	switch {
	case t.entries[s].Load() != nil || t.filling[s]:
		t.mu.Unlock()
		return true
	case t.place(int64(n)):
		e.data = t.free[:n:n]
		t.free = t.free[n:]
	case t.roomDisk(int64(n)):
		e.off = t.diskOff
		t.diskOff += int64(n)
	default:
		t.notHeld.Add(1)
		t.fullOnce(int64(n))
		t.mu.Unlock()
		return false
	}
	t.updateLeft()
	if t.filling == nil {
		t.filling = map[int]bool{}
	}
	t.filling[s] = true
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.filling, s)
		t.mu.Unlock()
	}()

	if e.data != nil {
		copy(e.data, data)
		t.ramBytes.Add(int64(n))
		t.ramImages.Add(1)
	} else {
		e.sum = crc32.Checksum(data, castagnoli)
		if _, err := t.disk.WriteAt(data, e.off); err != nil {
			t.mu.Lock()
			if !t.diskErr {
				t.diskErr = true
				t.updateLeft()
				t.log.Warn("the decoded-image cache's disk takes no more images", "folder", t.opts.Dir, "err", err)
			}
			t.mu.Unlock()
			t.notHeld.Add(1)
			return false
		}
		t.diskBytes.Add(int64(n))
		t.diskImages.Add(1)
	}
	// Published once its bytes are in place: Get never sees it before.
	t.entries[s].Store(e)
	t.filled.Add(1)
	return true
}

// place makes t.free hold at least n bytes, mapping a chunk (or a mapping
// of n bytes for a larger entry) within the RAM size; it reports whether
// it could.
func (t *Tier) place(n int64) bool {
	if int64(len(t.free)) >= n {
		return true
	}
	size := min(max(n, chunk), t.opts.RAM-t.mapped)
	if size < n {
		return false
	}
	m, err := syscall.Mmap(-1, 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.log.Warn("the decoded-image cache cannot map more memory; it holds no more images in RAM", "bytes", size, "err", err)
		t.opts.RAM = t.mapped
		return false
	}
	t.maps = append(t.maps, m)
	t.mapped += size
	// What was left of the last chunk is not used again.
	t.free = m
	return true
}

// Stats returns the tier's figures.
func (t *Tier) Stats() Stats {
	return Stats{
		Hits: t.hits.Load(), Misses: t.misses.Load(), Filled: t.filled.Load(),
		NotHeld: t.notHeld.Load(), Corrupt: t.corrupt.Load(),
		RAMBytes: t.ramBytes.Load(), RAMImages: t.ramImages.Load(),
		DiskBytes: t.diskBytes.Load(), DiskImages: t.diskImages.Load(),
		RAMSize: t.opts.RAM, DiskSize: t.opts.Disk,
	}
}
