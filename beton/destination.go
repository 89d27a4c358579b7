package beton

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/readfile"
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
	// after a failed Commit, and more than once. An error says what could
	// not be discarded (an upload left in a bucket), and repeats on later
	// calls.
	Abort() error
	// Name names the destination in errors: a path or a URL without
	// credentials.
	Name() string
}

// WithAbort returns err with the error of an abort that failed after it
// (Destination.Abort), unless err holds that already.
func WithAbort(err, abort error) error {
	if abort == nil || errors.Is(err, abort) {
		return err
	}
	return fmt.Errorf("%w; %w", err, abort)
}

// FileDestination writes a beton to a local file, through a temporary
// file in the same folder (the current one for a bare name, never
// $TMPDIR, which may be RAM or another filesystem), renamed into place by
// Commit after a sync, so that an interrupted write never leaves a file
// that looks complete.
//
// The temporary file has no name where the filesystem allows it
// (O_TMPFILE, Linux): a writer killed with SIGKILL leaves nothing. Where it
// must have one (.NAME.tmp-*), the writer holds a lock on it (flock) while
// it lives, and the next write to the same path removes those whose
// writer is gone. Commit names the file the same way for the moment of its
// rename.
type FileDestination struct {
	path, dir, base string
	tmp             string // the temporary file's name, "" while it has none
	fh              *os.File
	off             int64 // where Write's bytes go
	head            int64 // bytes reserved for the head
	synced          int64 // bytes up to which writeback was started
	aborted         bool
	abortErr        error // Abort's, given again by later calls
}

// NewFileDestination creates the temporary file beside path. path must
// name a regular file or nothing: a beton never replaces a device, a
// FIFO, a socket or a folder.
func NewFileDestination(path string) (*FileDestination, error) {
	if path == "" {
		return nil, errors.New("writing a beton: no file name given")
	}
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("writing %s: it is %s, not a regular file; a beton replaces only a file (give a new name)", path, readfile.Kind(st.Mode()))
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("writing %s: %w", path, err)
	}
	d := &FileDestination{path: path, dir: filepath.Dir(path), base: filepath.Base(path)}
	removeStaleTemps(d.dir, d.base)
	fh, tmp, err := createTemp(d.dir, d.base)
	if err != nil {
		return nil, fmt.Errorf("creating %s: %w", path, err)
	}
	d.fh, d.tmp = fh, tmp
	return d, nil
}

// namedTemps makes every temporary file a named one, as where the
// filesystem has no O_TMPFILE (tests).
var namedTemps = false

// tempPattern is the name of a temporary file of base, for
// os.CreateTemp: tempPrefix, this machine's token and process id (see
// removeStaleTemps), and a random number.
func tempPattern(base string) string { return tempOwner(base) + "*" }

func tempPrefix(base string) string { return "." + base + ".tmp-" }

// tempOwner is the start of this process's temporary files' names of base.
func tempOwner(base string) string {
	return tempPrefix(base) + hostToken() + "-" + strconv.Itoa(os.Getpid()) + "-"
}

// hostToken names this machine's boot in temporary files' names: a hash
// of its host name and boot id, for removeStaleTemps to tell its own
// writers' files from other machines'.
var hostToken = sync.OnceValue(func() string {
	h := sha256.New()
	name, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	h.Write([]byte(name + "\x00" + strings.TrimSpace(string(boot))))
	return hex.EncodeToString(h.Sum(nil)[:6])
})

// staleAfter is how long another machine's temporary file (or one of a
// name without a machine) must have been left unchanged before a write
// removes it: a live writer changes its file all along.
const staleAfter = 24 * time.Hour

// removeStaleTemps removes dir's temporary files of base whose writer is
// gone: those this machine's processes wrote whose process has ended, and
// others left unchanged for staleAfter; none that a process holds locked.
// Another machine's live writer's file is not locked here where locks are
// per mount (a network or FUSE filesystem), and its process id means
// nothing here: only its age tells. Errors are no matter: a file left is
// removed by a later write.
func removeStaleTemps(dir, base string) {
	ents, _ := os.ReadDir(dir)
	mine := tempPrefix(base) + hostToken() + "-"
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), tempPrefix(base)) || !e.Type().IsRegular() {
			continue
		}
		name := filepath.Join(dir, e.Name())
		f, err := os.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
		if err != nil {
			continue
		}
		st, err := f.Stat()
		gone := err == nil && st.Mode().IsRegular() && time.Since(st.ModTime()) > staleAfter
		if rest, ok := strings.CutPrefix(e.Name(), mine); ok && err == nil && st.Mode().IsRegular() {
			pid, _, _ := strings.Cut(rest, "-")
			if n, err := strconv.Atoi(pid); err == nil && n > 0 && syscall.Kill(n, 0) == syscall.ESRCH {
				gone = true
			}
		}
		if gone && tryLock(f) {
			os.Remove(name)
		}
		f.Close()
	}
}

// createTemp creates the temporary file of base in dir, locked: without a
// name (O_TMPFILE) where the filesystem allows it, else named after base.
func createTemp(dir, base string) (*os.File, string, error) {
	if !namedTemps && unnamedWorks(dir, base) {
		if fh, err := openUnnamed(dir); err == nil {
			lock(fh)
			return fh, "", nil
		}
	}
	for {
		fh, err := os.CreateTemp(dir, tempPattern(base))
		if err != nil {
			return nil, "", err
		}
		lock(fh)
		// Another write's removeStaleTemps may have found it unlocked
		// between its creation and the lock: then make another.
		if sameFile(fh, fh.Name()) {
			return fh, fh.Name(), nil
		}
		fh.Close()
	}
}

// unnamedWorks reports whether dir's filesystem can both make a file
// without a name and, at Commit, give it its mode and a name: some take
// O_TMPFILE and fail the rest (go-fuse's loopback: fchmod ENOENT, linkat
// EXDEV), which would fail a write at its very end. It tries with a file
// of its own, named for a moment (a writer killed then leaves a stale
// temporary file, which the next write removes).
func unnamedWorks(dir, base string) bool {
	fh, err := openUnnamed(dir)
	if err != nil {
		return false
	}
	defer fh.Close()
	if err := fh.Chmod(0o600); err != nil {
		return false
	}
	name, err := linkUnnamed(fh, dir, base)
	if err != nil {
		return false
	}
	os.Remove(name)
	return true
}

// sameFile reports whether name is fh's file.
func sameFile(fh *os.File, name string) bool {
	a, err1 := fh.Stat()
	b, err2 := os.Lstat(name)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
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

// Skip passes over n bytes, which read as zeros: a hole in the file.
func (d *FileDestination) Skip(n int64) error {
	if d.fh == nil {
		return fmt.Errorf("writing %s: already committed or aborted", d.path)
	}
	if n < 0 {
		return fmt.Errorf("writing %s: a skip of %d bytes", d.path, n)
	}
	d.off += n
	return nil
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
		if err := d.fh.Sync(); err != nil {
			return err
		}
		if d.tmp == "" {
			// A name for the rename, the file still locked.
			tmp, err := linkUnnamed(d.fh, d.dir, d.base)
			if err != nil {
				return err
			}
			d.tmp = tmp
		}
		return nil
	}()
	if err == nil {
		if err = os.Rename(d.tmp, d.path); err != nil {
			err = fmt.Errorf("renaming %s to %s: %w", d.tmp, d.path, err)
		}
	}
	d.fh.Close()
	d.fh = nil
	if err != nil {
		if d.tmp != "" {
			os.Remove(d.tmp)
		}
		return fmt.Errorf("writing %s: %w", d.path, err)
	}
	return nil
}

// Abort closes and removes the temporary file.
func (d *FileDestination) Abort() error {
	if d.fh != nil {
		d.fh.Close()
		d.fh = nil
	}
	if d.tmp == "" || d.aborted {
		return d.abortErr
	}
	d.aborted = true
	if err := os.Remove(d.tmp); err != nil && !os.IsNotExist(err) {
		d.abortErr = fmt.Errorf("removing %s: %w", d.tmp, err)
	}
	return d.abortErr
}
