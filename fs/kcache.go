package fs

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// kernelCopies bounds what the kernel's page cache keeps of the mount's
// files. With zero-message opens files are read through the kernel's page
// cache (see View.open), so a file read once is read again without a
// request to the mount, as from a plain folder. The kernel keeps a file's
// bytes only while the beton page they come from is in the mount's cache:
// when the cache evicts a page, the copies of its samples (and of its bytes
// in dataset.beton) that the kernel was given are invalidated, and when it
// evicts a range, the copy of its sample. The kernel
// then holds at most what the cache holds, and its copies are clean pages
// that it may drop sooner under memory pressure. With --kernel-cache, or
// without zero-message opens, nothing is tracked.
//
// Two rules keep the cache's plans true to what is read. An invalidation
// waits invalidateDelay after its page's eviction: a page is evicted as
// soon as the last of its samples is read, and an invalidation that came
// between the READ's reply and the reader's copy of it would make the
// kernel read the file again. And a new announced order first drops every
// copy (dropAll), so that each read of the order reaches the cache, whose
// plan waits for it: a read the kernel served from a copy would leave the
// plan waiting for a read that never comes, holding its page. (When the
// cache holds every page, nothing is evicted and no copy is dropped.)
//
// A read records its copy while its page is pinned, so the page cannot be
// evicted between the copy and the record. Invalidations are sent by one
// goroutine, or by dropAll, never while a FUSE request waits for them to
// finish a reply: the kernel may wait in them for a READ in flight on the
// same file, whose reply another request goroutine writes.
type kernelCopies struct {
	f      *beton.File
	active atomic.Bool // tracking: set by start
	// fits is set when the cache holds every page: nothing is evicted,
	// and no plan has to see reads to choose what to keep.
	fits bool

	mu sync.Mutex
	// Guarded by mu.
	samples map[int32]heldFile // sample → its inode and file size
	pages   map[int64]bool     // beton pages given out through dataset.beton
	dataset *gofs.Inode
	bytes   int64      // sizes of the files in samples, and pages in pages
	evicted []eviction // pages evicted, not yet processed, oldest first
	closed  bool
	invals  uint64
	notify  func(ino uint64, off, size int64) error

	wake chan struct{}
	// sending serializes the senders of invalidations (run and dropAll).
	sending sync.Mutex
}

// invalidateDelay is how long an evicted page's copies are kept before
// they are invalidated: far longer than a reader takes to copy a READ's
// reply, short enough that the kernel holds little beyond the budget.
const invalidateDelay = 50 * time.Millisecond

type eviction struct {
	page   int64
	sample int32 // a range of the page, or -1: the whole page
	at     time.Time
}

type heldFile struct {
	inode *gofs.Inode
	size  int64
}

func newKernelCopies(f *beton.File, fits bool) *kernelCopies {
	return &kernelCopies{f: f, fits: fits, samples: map[int32]heldFile{}, pages: map[int64]bool{}, wake: make(chan struct{}, 1)}
}

// start begins tracking, with notify sending invalidations to the kernel.
func (k *kernelCopies) start(notify func(ino uint64, off, size int64) error) {
	k.mu.Lock()
	k.notify = notify
	k.mu.Unlock()
	k.active.Store(true)
	go k.run()
}

// sampleRead records that the kernel was given bytes of sample s's file.
func (k *kernelCopies) sampleRead(s int, inode *gofs.Inode, size int64) {
	if !k.active.Load() {
		return
	}
	k.mu.Lock()
	if _, ok := k.samples[int32(s)]; !ok {
		k.samples[int32(s)] = heldFile{inode, size}
		k.bytes += size
	}
	k.mu.Unlock()
}

// datasetRead records that the kernel was given bytes of dataset.beton
// from beton page p.
func (k *kernelCopies) datasetRead(p int64, inode *gofs.Inode) {
	if !k.active.Load() {
		return
	}
	k.mu.Lock()
	k.dataset = inode
	if !k.pages[p] {
		k.pages[p] = true
		k.bytes += k.f.PageSize()
	}
	k.mu.Unlock()
}

// evict is the cache's OnEvict: it queues page p, or sample's range of
// it, and returns at once.
func (k *kernelCopies) evict(p int64, sample int) {
	if !k.active.Load() {
		return
	}
	k.mu.Lock()
	k.evicted = append(k.evicted, eviction{p, int32(sample), time.Now()})
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Bytes returns an upper bound of what the kernel holds of the mount's
// sample files and dataset.beton, or -1 when that is not tracked.
func (k *kernelCopies) Bytes() int64 {
	if !k.active.Load() {
		return -1
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.bytes
}

// Invalidations returns how many files and page ranges were invalidated.
func (k *kernelCopies) Invalidations() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.invals
}

func (k *kernelCopies) close() {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

type invalidation struct {
	inode     *gofs.Inode
	off, size int64
}

// dropAll invalidates every copy the kernel was given, and returns when the
// kernel has dropped them; unless the cache holds every page.
func (k *kernelCopies) dropAll() {
	if !k.active.Load() || k.fits {
		return
	}
	k.mu.Lock()
	var batch []invalidation
	for s, h := range k.samples {
		batch = append(batch, invalidation{h.inode, 0, 0})
		delete(k.samples, s)
	}
	for p := range k.pages {
		batch = append(batch, invalidation{k.dataset, k.f.PageOffset(p), k.f.PageSize()})
		delete(k.pages, p)
	}
	k.bytes = 0
	k.invals += uint64(len(batch))
	notify := k.notify
	k.mu.Unlock()
	k.send(notify, batch)
}

func (k *kernelCopies) send(notify func(ino uint64, off, size int64) error, batch []invalidation) {
	if notify == nil || len(batch) == 0 {
		return
	}
	k.sending.Lock()
	defer k.sending.Unlock()
	for _, inv := range batch {
		// An error means the kernel no longer knows the inode
		// (forgotten, so it holds nothing) or the mount is gone.
		notify(inv.inode.StableAttr().Ino, inv.off, inv.size)
	}
}

func (k *kernelCopies) run() {
	var batch []invalidation
	var timer *time.Timer
	var due <-chan time.Time
	for {
		select {
		case <-k.wake:
		case <-due:
		}
		k.mu.Lock()
		if k.closed {
			k.mu.Unlock()
			return
		}
		batch = batch[:0]
		dropSample := func(s int32) {
			if h, ok := k.samples[s]; ok {
				delete(k.samples, s)
				k.bytes -= h.size
				batch = append(batch, invalidation{h.inode, 0, 0})
			}
		}
		cut := time.Now().Add(-invalidateDelay)
		n := 0
		for _, e := range k.evicted {
			if e.at.After(cut) {
				break
			}
			n++
			if e.sample >= 0 {
				dropSample(e.sample)
				continue
			}
			for _, s := range k.f.PageSamples(e.page) {
				dropSample(int32(s))
			}
			if k.pages[e.page] {
				delete(k.pages, e.page)
				k.bytes -= k.f.PageSize()
				batch = append(batch, invalidation{k.dataset, k.f.PageOffset(e.page), k.f.PageSize()})
			}
		}
		k.evicted = k.evicted[:copy(k.evicted, k.evicted[n:])]
		due = nil
		if len(k.evicted) > 0 {
			wait := time.Until(k.evicted[0].at.Add(invalidateDelay))
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			due = timer.C
		}
		k.invals += uint64(len(batch))
		notify := k.notify
		k.mu.Unlock()
		k.send(notify, batch)
	}
}
