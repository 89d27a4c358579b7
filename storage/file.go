package storage

// No locks: a FileSource is immutable after OpenFile but for directRefused,
// an atomic that only ever goes from false to true. *os.File keeps its
// descriptors valid while a read uses them, so Close may race with reads.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// FileSource reads a local file, or one on NFS or any other mounted
// filesystem. It keeps the kernel page cache out of the way of the Cache:
// by default every read drops the range it read from the kernel page cache
// once copied (POSIX_FADV_DONTNEED), so the file does not occupy memory
// twice; with DirectIO it reads with O_DIRECT and the kernel caches
// nothing; with KernelCache it leaves the kernel page cache alone. It is
// safe for concurrent use.
type FileSource struct {
	// Immutable after OpenFile.
	f      *os.File
	direct *os.File // opened with O_DIRECT; nil unless DirectIO was granted
	rc     syscall.RawConn
	drc    syscall.RawConn // direct's
	name   string
	size   int64
	mode   fileMode
	// identity is the path with size and modification time at open.
	identity string
	log      *slog.Logger

	// directRefused is set when the filesystem refused an O_DIRECT read;
	// reads go the modeDrop way from then on.
	directRefused atomic.Bool
	warnOnce      sync.Once
}

var _ Source = (*FileSource)(nil)

type fileMode int

const (
	modeDrop   fileMode = iota // pread, then POSIX_FADV_DONTNEED
	modeDirect                 // O_DIRECT through aligned buffers
	modeKernel                 // plain pread
)

func (m fileMode) String() string {
	switch m {
	case modeDrop:
		return "fadvise"
	case modeDirect:
		return "direct"
	default:
		return "kernel-cache"
	}
}

// directAlign is the alignment of offsets, lengths and memory of O_DIRECT
// reads: 4096 suits every common block device.
const directAlign = 4096

// bounceSize is the size of the aligned buffers that O_DIRECT reads go
// through when the caller's buffer or range is not aligned.
const bounceSize = 2 << 20

var bouncePool = sync.Pool{New: func() any {
	b := make([]byte, bounceSize+directAlign)
	skip := (directAlign - int(uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign)) % directAlign
	b = b[skip : skip+bounceSize : skip+bounceSize]
	return &b
}}

func isAligned(b []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%directAlign == 0
}

// OpenFile opens a file source. Only opts.Logger, DirectIO and KernelCache
// matter here.
func OpenFile(path string, opts Options) (*FileSource, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a FIFO is refused below, not waited on for a writer
	// (the open would block, deaf to signals). A regular file ignores it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the beton: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the beton: %w", err)
	}
	if st.IsDir() {
		f.Close()
		return nil, fmt.Errorf("opening the beton %s: it is a folder; an ImageFolder tree becomes a beton with: ffcvfs write %s OUT.beton", path, path)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("opening the beton %s: it is %s, not a regular file; a beton is a file, or an s3:// or http(s):// URL", path, fileKind(st.Mode()))
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("opening the beton %s: %w", path, err)
	}
	s := &FileSource{f: f, rc: rc, name: path, size: st.Size(), log: opts.Logger}
	abs, _ := filepath.Abs(path)
	s.identity = fmt.Sprintf("file://%s size=%d mtime=%d", abs, st.Size(), st.ModTime().UnixNano())
	switch {
	case opts.KernelCache:
		s.mode = modeKernel
	case opts.DirectIO:
		s.mode = modeDirect
		d, err := openDirect(path)
		if err == nil {
			s.drc, err = d.SyscallConn()
			if err != nil {
				d.Close()
			}
		}
		if err != nil {
			s.refuseDirect(err)
		} else {
			s.direct = d
		}
	default:
		s.mode = modeDrop
	}
	if s.mode != modeKernel {
		adviseRandom(s.rc)
	}
	return s, nil
}

// refuseDirect switches to dropping pages after reads, warning once.
func (s *FileSource) refuseDirect(err error) {
	s.directRefused.Store(true)
	s.warnOnce.Do(func() {
		s.log.Warn("the filesystem refuses O_DIRECT; reading through the page cache and dropping what was read instead",
			"source", s.name, "err", err.Error())
	})
}

// ReadAt reads len(p) bytes at off; see Source. A local read is not
// interrupted: ctx is looked at before it starts.
func (s *FileSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("%s: read of bytes %d-%d: %w", s.name, off, off+int64(len(p))-1, context.Cause(ctx))
	}
	if s.mode == modeDirect && !s.directRefused.Load() {
		n, err := s.readDirect(p, off)
		if !errors.Is(err, syscall.EINVAL) {
			return n, s.wrap(err, len(p), off)
		}
		s.refuseDirect(err)
	}
	n, err := s.f.ReadAt(p, off)
	if s.mode != modeKernel {
		dropCache(s.rc, off, n)
	}
	return n, s.wrap(err, len(p), off)
}

// wrap adds the file and range to a read error; io.EOF stays as it is.
func (s *FileSource) wrap(err error, n int, off int64) error {
	if err == nil || err == io.EOF {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s: read of bytes %d-%d: %w", s.name, off, off+int64(n)-1, err)
}

// readDirect reads through the O_DIRECT descriptor: straight into p where
// p and off are aligned alike, through a bounce buffer elsewhere (the
// unaligned head, a short or unaligned rest, the tail at the end of the
// file).
func (s *FileSource) readDirect(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("negative offset %d", off)
	}
	want := len(p)
	if off >= s.size {
		if want == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	if int64(want) > s.size-off {
		p = p[:s.size-off]
	}
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		dst := p[n:]
		if pos%directAlign == 0 && len(dst) >= directAlign && isAligned(dst) {
			m, err := directRead(s.drc, dst[:len(dst)&^(directAlign-1)], pos)
			n += m
			if err != nil {
				return n, err
			}
			if m == 0 {
				break // the file is shorter than at open
			}
			continue
		}
		a := pos &^ (directAlign - 1)
		end := (pos + int64(len(dst)) + directAlign - 1) &^ (directAlign - 1)
		bp := bouncePool.Get().(*[]byte)
		buf := (*bp)[:min(end-a, bounceSize)]
		m, err := directRead(s.drc, buf, a)
		c := 0
		if int64(m) > pos-a {
			c = copy(dst, buf[pos-a:m])
		}
		bouncePool.Put(bp)
		n += c
		if err != nil {
			return n, err
		}
		if c == 0 {
			break
		}
	}
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// Size returns the file's size at open.
func (s *FileSource) Size() int64 { return s.size }

// Name returns the path.
func (s *FileSource) Name() string { return s.name }

// Identity returns the file's absolute path with its size and
// modification time at open.
func (s *FileSource) Identity() string { return s.identity }

// Mode returns how the source reads: "fadvise" (the default), "direct"
// (O_DIRECT) or "kernel-cache"; "fadvise" too when O_DIRECT was asked for
// but refused.
func (s *FileSource) Mode() string {
	if s.mode == modeDirect && s.directRefused.Load() {
		return modeDrop.String()
	}
	return s.mode.String()
}

// Close closes the file. Later reads fail with an error matching
// os.ErrClosed.
func (s *FileSource) Close() error {
	err := s.f.Close()
	if s.direct != nil {
		if derr := s.direct.Close(); err == nil {
			err = derr
		}
	}
	if err != nil {
		return fmt.Errorf("close %s: %w", s.name, err)
	}
	return nil
}

// fileKind names the type of a file that is not a regular one.
func fileKind(m os.FileMode) string {
	switch {
	case m&os.ModeNamedPipe != 0:
		return "a FIFO"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	}
	return "a " + m.Type().String() + " file"
}
