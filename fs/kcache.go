package fs

import (
	"sync"

	"github.com/ffcvfs/ffcvfs/beton"
	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// kernelCopies bounds what the kernel's page cache keeps of the mount's
// files. Files are read through the kernel's page cache (see View.open), so
// a file read once is read again without a request to the mount, as from a
// plain folder. By default the kernel keeps a file's bytes only while the
// beton page they come from is in the mount's cache: when the cache evicts
// a page, the copies of its samples (and of its bytes in dataset.beton)
// that the kernel was given are invalidated. The kernel then holds at most
// what the cache holds, and its copies are clean pages that it may drop
// sooner under memory pressure. With --kernel-cache nothing is tracked and
// the kernel keeps what it likes, as for any file.
//
// A read records its copy while its page is pinned, so the page cannot be
// evicted between the copy and the record. Invalidations are sent by one
// goroutine, never from a FUSE request: the kernel may wait in them for a
// read in flight on the same file, whose reply a request goroutine writes.
type kernelCopies struct {
	f         *beton.File
	unbounded bool

	mu sync.Mutex
	// Guarded by mu.
	samples map[int32]heldFile // sample → its inode and file size
	pages   map[int64]bool     // beton pages given out through dataset.beton
	dataset *gofs.Inode
	bytes   int64   // sizes of the files in samples, and pages in pages
	evicted []int64 // pages evicted, not yet processed
	wake    chan struct{}
	closed  bool
	invals  uint64

	// notify sends an invalidation to the kernel; set by Mount.
	notify func(ino uint64, off, size int64) error // guarded by mu
}

// setNotify sets the function that sends invalidations to the kernel.
func (k *kernelCopies) setNotify(fn func(ino uint64, off, size int64) error) {
	k.mu.Lock()
	k.notify = fn
	k.mu.Unlock()
}

type heldFile struct {
	inode *gofs.Inode
	size  int64
}

func newKernelCopies(f *beton.File, unbounded bool) *kernelCopies {
	k := &kernelCopies{f: f, unbounded: unbounded, samples: map[int32]heldFile{}, pages: map[int64]bool{}, wake: make(chan struct{}, 1)}
	if !unbounded {
		go k.run()
	}
	return k
}

// sampleRead records that the kernel was given bytes of sample s's file.
func (k *kernelCopies) sampleRead(s int, inode *gofs.Inode, size int64) {
	if k.unbounded {
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
	if k.unbounded {
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

// evict is the cache's OnEvict: it queues page p and returns at once.
func (k *kernelCopies) evict(p int64) {
	if k.unbounded {
		return
	}
	k.mu.Lock()
	k.evicted = append(k.evicted, p)
	k.mu.Unlock()
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// Bytes returns an upper bound of what the kernel holds of the mount's
// sample files and dataset.beton, or -1 when that is not tracked.
func (k *kernelCopies) Bytes() int64 {
	if k.unbounded {
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

func (k *kernelCopies) run() {
	var batch []invalidation
	for range k.wake {
		for {
			k.mu.Lock()
			if k.closed {
				k.mu.Unlock()
				return
			}
			batch = batch[:0]
			for _, p := range k.evicted {
				for _, s := range k.f.PageSamples(p) {
					if h, ok := k.samples[int32(s)]; ok {
						delete(k.samples, int32(s))
						k.bytes -= h.size
						batch = append(batch, invalidation{h.inode, 0, 0})
					}
				}
				if k.pages[p] {
					delete(k.pages, p)
					k.bytes -= k.f.PageSize()
					batch = append(batch, invalidation{k.dataset, k.f.PageOffset(p), k.f.PageSize()})
				}
			}
			k.evicted = k.evicted[:0]
			k.invals += uint64(len(batch))
			notify := k.notify
			k.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			for _, inv := range batch {
				// An error means the kernel no longer knows the inode
				// (forgotten, so it holds nothing) or the mount is gone.
				if notify != nil {
					notify(inv.inode.StableAttr().Ino, inv.off, inv.size)
				}
			}
		}
	}
}
