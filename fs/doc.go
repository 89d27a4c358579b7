// Package fs serves a beton as a read-only ImageFolder tree over FUSE
// (go-fuse v2): one folder per class, holding one file per sample, named by
// zero-padded sample id so that sorted order is id order, with the
// extension of its content (.jpg for JPEG images, .ppm for raw ones, whose
// P6 header is assembled on the fly). A control folder, .ffcvfs, can be
// looked up by path but is never listed, since torchvision's ImageFolder
// would take a listed folder for a class:
//
//	.ffcvfs/dataset.beton     the whole beton, byte for byte, from the cache
//	.ffcvfs/stats.json        cache statistics and read counts
//	.ffcvfs/announce          write sample ids (or "imagefolder" and then
//	                          ImageFolder indices), one per line, to announce
//	                          the order this process will read in
//	.ffcvfs/orders/KIND/SEED/EPOCH
//	.ffcvfs/orders/KIND/SEED/RANK-of-WORLD/EPOCH
//	                          read an order (ImageFolder indices, one per
//	                          line) and announce it; KIND is quasi-random,
//	                          random or sequential (see package order)
//
// # Concurrency
//
// go-fuse calls node methods from many goroutines. Nodes are immutable
// after creation; all mutable state lives in the page cache (its own lock)
// and in atomic counters.
//
// # What it must never do
//
// Change a file: attributes and entries never change, so the kernel may
// cache them for as long as it likes. Turn an error into anything but one
// EIO (or ENOENT, EINVAL, EACCES) for the one call that failed: errors are
// mapped in one function, toErrno, which logs the cause first, once per
// cause (pagecache.Cause) however many reads fail for it: stats.json counts
// them all.
//
// Read its own mount. A FUSE server that reads a file of its own
// mountpoint waits for itself: the kernel sends the read back to the
// server, whose goroutines may all be busy waiting. The same holds for a
// source path under the mountpoint; Mount refuses one. The same warning
// applies to anything the server does while serving a request: no stat,
// open or readdir of paths under the mountpoint.
package fs
