package beton

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// A Destination receives a beton from a Writer in two steps, so that it
// can be written in one pass where seeking back is impossible (an S3
// multipart upload): first, with Write, everything after the head in file
// order (padding, pages, tables); then, with Commit, the head: bytes
// [0, len(head)) of the file (header, field descriptors, metadata table),
// the bytes Write's began after. Nothing may appear under the
// destination's name before Commit succeeds; Abort discards everything.
type Destination interface {
	// Reserve is called once, before any Write, with the size of the head
	// that Commit will give: Write's bytes begin at that offset.
	Reserve(headSize int64) error
	io.Writer
	// Commit puts head before the bytes written and makes the file
	// appear whole. It is called once, after the last Write.
	Commit(head []byte) error
	// Abort discards what was written; nothing appears. It may be called
	// after a failed Commit, and more than once.
	Abort() error
	// Name names the destination in errors: a path or a URL without
	// credentials.
	Name() string
}

// FileDestination writes a beton to a local file: to a temporary file
// beside it, renamed into place by Commit after a sync, so that an
// interrupted write never leaves a file that looks complete.
type FileDestination struct {
	path, tmp string
	fh        *os.File
	off       int64 // where Write's bytes go
	head      int64 // bytes reserved for the head
	synced    int64 // bytes up to which writeback was started
}

// NewFileDestination creates the temporary file beside path.
func NewFileDestination(path string) (*FileDestination, error) {
	dir, base := filepath.Split(path)
	fh, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	return &FileDestination{path: path, tmp: fh.Name(), fh: fh}, nil
}

// Name returns the path.
func (d *FileDestination) Name() string { return d.path }

// Reserve leaves the first n bytes of the file to Commit.
func (d *FileDestination) Reserve(n int64) error {
	if n < 0 {
		return fmt.Errorf("writing %s: a head of %d bytes", d.path, n)
	}
	d.head, d.off, d.synced = n, n, n
	return nil
}

// Write writes p after the bytes written before.
func (d *FileDestination) Write(p []byte) (int, error) {
	if d.fh == nil {
		return 0, fmt.Errorf("writing %s: already committed or aborted", d.path)
	}
	n, err := d.fh.WriteAt(p, d.off)
	d.off += int64(n)
	if d.off-d.synced >= writebackChunk {
		startWriteback(d.fh, d.synced, d.off-d.synced)
		d.synced = d.off
	}
	return n, err
}

// writebackChunk: every this many bytes written, the kernel is asked to
// start writing them to disk, so that Commit's sync has little left to
// wait for (a 160 MB beton's sync took 0.25 s here, all at the end).
const writebackChunk = 8 << 20

// Commit writes head at offset 0, syncs, and renames the file into place.
func (d *FileDestination) Commit(head []byte) error {
	if d.fh == nil {
		return fmt.Errorf("writing %s: already committed or aborted", d.path)
	}
	if int64(len(head)) != d.head {
		d.Abort()
		return fmt.Errorf("writing %s: a head of %d bytes, %d reserved", d.path, len(head), d.head)
	}
	err := func() error {
		if _, err := d.fh.WriteAt(head, 0); err != nil {
			return err
		}
		if err := d.fh.Chmod(0o644); err != nil {
			return err
		}
		return d.fh.Sync()
	}()
	if cerr := d.fh.Close(); err == nil {
		err = cerr
	}
	d.fh = nil
	if err != nil {
		os.Remove(d.tmp)
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	if err := os.Rename(d.tmp, d.path); err != nil {
		os.Remove(d.tmp)
		return fmt.Errorf("renaming %s to %s: %w", d.tmp, d.path, err)
	}
	return nil
}

// Abort closes and removes the temporary file.
func (d *FileDestination) Abort() error {
	if d.fh != nil {
		d.fh.Close()
		d.fh = nil
	}
	if err := os.Remove(d.tmp); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
