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
// The loops share the /dev/fuse descriptor: one at a time waits on it in
// the netpoller and reads a request (about a microsecond), the others
// wait their turn on the descriptor's lock, which the block profile shows
// as blocked time, not CPU; each answers its own request and writes its
// reply without a lock. Its goroutines waited under a millisecond in all
// for mutexes while 2 readers read 321 MB of files; most of a request's
// CPU is in the system calls that read the page and write the reply.
//
// # What it must never do
//
// Leave a dead mount behind when mounting fails half-way, or block the
// netpoller: a request is read only once epoll says one is queued. Hold a
// file of its own mount that needs an answer to close: a process killed
// then closes it as it exits, and waits for ever for the answer it can no
// longer give (the poll hack's file is opened FOPEN_NOFLUSH for that).
package transport
