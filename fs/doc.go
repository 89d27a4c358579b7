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
//	.ffcvfs/announce          a symlink to the announce socket: send sample
//	                          ids (or "imagefolder" and then ImageFolder
//	                          indices), one per line, to announce the order
//	                          this process will read in (package orders)
//	.ffcvfs/orders/KIND/SEED/EPOCH
//	.ffcvfs/orders/KIND/SEED/RANK-of-WORLD/EPOCH
//	                          read an order (ImageFolder indices, one per
//	                          line) and announce it; KIND is quasi-random,
//	                          random or sequential (see package order)
//
// # Requests per file
//
// Each FUSE request is a round trip through this process while a loader
// waits, so the mount asks the kernel for as few as it can: no FLUSH at
// close (FOPEN_NOFLUSH, and ENOSYS for any that comes), READs of up to 1 MiB,
// entries and attributes cached for a day, and zero-message opens: the
// first OPEN is answered ENOSYS, so the kernel sends no OPEN or RELEASE and
// reads every file through its page cache, its copies bounded by the
// cache's evictions (kernelCopies; --kernel-cache lets it keep them). A
// file read whole then costs an IOCTL (Python's isatty) and a READ, or the
// IOCTL alone while the kernel holds the file. On a kernel without
// zero-message opens (or with Compat.Opens) files are read with direct
// I/O, so the cache sees every read and its budget is the memory the data
// takes. stats.json counts the
// requests by opcode (countingFS). Folders are listed with READDIR, not
// READDIRPLUS, so a listing of a million files makes no inode for each.
//
// The requests are read and answered by transport.Server, not go-fuse's fuse.Server:
// it waits for requests in the netpoller and reads and writes /dev/fuse
// with raw system calls, which costs the Go runtime no thread hand-off per
// request (see Server for why and by how much).
//
// Control files need no OPEN either: stats.json and the order files are
// made at lookup, each lookup a new inode whose content never changes.
//
// # Read-only
//
// The superblock is read-only (MS_RDONLY): the kernel refuses every open
// for writing and every writable shared mapping, whoever asks, before the
// mount hears of it (without OPEN, the mount could not refuse them
// itself). So nothing is written through the tree: orders are announced
// through a Unix socket outside it, the owner's alone (package orders). Plans
// are named by the uid that announced them, so that with allow_other one
// user's orders never replace another's.
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
// cause (storage.Cause) however many reads fail for it: stats.json counts
// them all.
//
// Read its own mount. A FUSE server that reads a file of its own
// mountpoint waits for itself: the kernel sends the read back to the
// server, whose goroutines may all be busy waiting. The same holds for a
// source path under the mountpoint; Mount refuses one. The same warning
// applies to anything the server does while serving a request: no stat,
// open or readdir of paths under the mountpoint.
package fs
