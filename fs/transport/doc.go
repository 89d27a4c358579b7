// Package transport is the FUSE connection of a mount: it mounts a folder
// read-only (fusermount3, or mount(2) as root), answers the kernel's INIT,
// and reads requests from /dev/fuse and writes their replies, handing each
// to go-fuse's protocol server; and it knows the mount table: whether a
// folder can take a mount, is one, which processes hold it, and how to
// unmount it.
//
// # What it owns
//
//   - Server, which reads /dev/fuse through the runtime's netpoller with
//     raw system calls rather than go-fuse's blocking reads (see Server for
//     why), and sends the kernel invalidations.
//   - The mount table helpers: CheckFUSE, CheckMountpoint, IsMounted,
//     Unmount, UnmountLazy, Holders.
//
// # Concurrency
//
// A Server's loops run on goroutines of their own; Unmount, Abort, Wait
// and Invalidate may be called from any goroutine.
//
// # What it must never do
//
// Leave a dead mount behind when mounting fails half-way, or block the
// netpoller: a request is read only once epoll says one is queued. Hold a
// file of its own mount that needs an answer to close: a process killed
// then closes it as it exits, and waits for ever for the answer it can no
// longer give (the poll hack's file is opened FOPEN_NOFLUSH for that).
package transport
