package cudafeed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/ffcvfs/ffcvfs/fields"
	"golang.org/x/sys/unix"
)

// ShmDir is where shared-memory rings live.
const ShmDir = "/dev/shm"

// Alignment is the alignment, in bytes, of every field region and of every slot.
const Alignment = 64

// ErrExists is returned by CreateRing when the shared-memory file exists.
var ErrExists = errors.New("shared-memory file already exists")

// dtypeSizes gives the element size of each supported dtype.
var dtypeSizes = fields.DTypes

// FieldSpec describes one field of a batch (package fields).
type FieldSpec = fields.Spec

// RingSpec describes a ring: the fields of one batch and the number of slots.
type RingSpec struct {
	Fields []FieldSpec
	Slots  int
}

// FieldInfo is a field's place inside a slot, as announced in the hello.
type FieldInfo struct {
	Name   string `json:"name"`
	DType  string `json:"dtype"`
	Shape  []int  `json:"shape"`
	Offset int    `json:"offset"` // from the start of the slot; a multiple of Alignment
	Bytes  int    `json:"bytes"`
	// Ends names the field that says where each sample of this
	// variable-size field ends (fields.Spec.Ends); empty for fixed-size
	// fields.
	Ends string `json:"ends,omitempty"`
}

// Validate checks the spec and returns the batch size (Shape[0], shared by
// every field).
func (l RingSpec) Validate() (batch int, err error) {
	if l.Slots < 1 {
		return 0, fmt.Errorf("cudafeed: ring spec needs at least one slot, has %d", l.Slots)
	}
	if len(l.Fields) == 0 {
		return 0, errors.New("cudafeed: ring spec has no fields")
	}
	seen := map[string]bool{}
	for i, f := range l.Fields {
		if f.Name == "" || seen[f.Name] {
			return 0, fmt.Errorf("cudafeed: field %d: name %q empty or repeated", i, f.Name)
		}
		seen[f.Name] = true
		if dtypeSizes[f.DType] == 0 {
			return 0, fmt.Errorf("cudafeed: field %q: unsupported dtype %q", f.Name, f.DType)
		}
		if len(f.Shape) == 0 {
			return 0, fmt.Errorf("cudafeed: field %q: empty shape (the first dimension is the batch)", f.Name)
		}
		for _, d := range f.Shape {
			if d < 1 {
				return 0, fmt.Errorf("cudafeed: field %q: shape %v has a dimension < 1", f.Name, f.Shape)
			}
		}
		if f.Ends != "" && len(f.Shape) != 2 {
			return 0, fmt.Errorf("cudafeed: field %q: variable-size, shape %v; want [batch, capacity per sample]", f.Name, f.Shape)
		}
		if i == 0 {
			batch = f.Shape[0]
		} else if f.Shape[0] != batch {
			return 0, fmt.Errorf("cudafeed: field %q: batch dimension %d, field %q has %d",
				f.Name, f.Shape[0], l.Fields[0].Name, batch)
		}
	}
	for _, f := range l.Fields {
		if f.Ends == "" {
			continue
		}
		i := slices.IndexFunc(l.Fields, func(e FieldSpec) bool { return e.Name == f.Ends })
		if i < 0 || l.Fields[i].DType != "int64" || len(l.Fields[i].Shape) != 1 {
			return 0, fmt.Errorf("cudafeed: field %q: its ends field %q is not an int64 field of shape [batch]", f.Name, f.Ends)
		}
	}
	return batch, nil
}

// Plan computes the field offsets and the slot size of a ring spec.
func (l RingSpec) Plan() (fields []FieldInfo, slotBytes int, err error) {
	if _, err := l.Validate(); err != nil {
		return nil, 0, err
	}
	off := 0
	for _, f := range l.Fields {
		n := dtypeSizes[f.DType]
		for _, d := range f.Shape {
			n *= d
		}
		fields = append(fields, FieldInfo{Name: f.Name, DType: f.DType,
			Shape: append([]int(nil), f.Shape...), Offset: off, Bytes: n, Ends: f.Ends})
		off = alignUp(off + n)
	}
	return fields, off, nil
}

func alignUp(n int) int { return (n + Alignment - 1) &^ (Alignment - 1) }

// ShmFullError says that the shared-memory folder cannot hold a ring.
type ShmFullError struct {
	Dir        string
	Need, Free int64 // bytes; Free is -1 when unknown
	Slots      int
}

func (e *ShmFullError) Error() string {
	return fmt.Sprintf("cudafeed: %s has %s free, a ring of %d slots needs %s", e.Dir, mib(e.Free), e.Slots, mib(e.Need))
}

func mib(n int64) string {
	if n < 0 {
		return "an unknown amount"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// Ring is a shared-memory ring of batch slots.
//
// Slot states (who may write a slot) are the Server's business; Ring only
// owns the memory.
type Ring struct {
	// Immutable after construction.
	path      string
	spec      RingSpec
	fields    []FieldInfo
	slotBytes int
	batch     int
	slots     [][][]byte // slots[i][f]: field f of slot i

	mem []byte // nil once closed
}

// CreateRing creates /dev/shm/NAME (mode 0600; it must not exist), sizes it
// to Slots × slot size and maps it.
func CreateRing(name string, spec RingSpec) (*Ring, error) {
	if name == "" || strings.ContainsRune(name, '/') || name == "." || name == ".." {
		return nil, fmt.Errorf("cudafeed: ring name %q: must be a plain file name", name)
	}
	batch, err := spec.Validate()
	if err != nil {
		return nil, err
	}
	fields, slotBytes, err := spec.Plan()
	if err != nil {
		return nil, err
	}
	path := ShmDir + "/" + name
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("cudafeed: %s: %w (another ffcvfeed, or a stale ring: remove it if nobody uses it)", path, ErrExists)
		}
		return nil, fmt.Errorf("cudafeed: creating %s: %w", path, err)
	}
	defer unix.Close(fd)
	fail := func(err error) (*Ring, error) {
		_ = unix.Unlink(path)
		return nil, err
	}
	// The umask can only narrow 0600; make it exactly 0600 all the same.
	if err := unix.Fchmod(fd, 0o600); err != nil {
		return fail(fmt.Errorf("cudafeed: chmod %s: %w", path, err))
	}
	size := slotBytes * spec.Slots
	// Reserved, not only sized: a sparse file whose pages /dev/shm cannot
	// give later kills the process that writes them (SIGBUS), mid-batch.
	if err := unix.Fallocate(fd, 0, 0, int64(size)); err != nil {
		if errors.Is(err, unix.ENOSPC) {
			var st unix.Statfs_t
			free := int64(-1)
			if unix.Fstatfs(fd, &st) == nil {
				free = int64(st.Bavail) * st.Bsize
			}
			return fail(&ShmFullError{Dir: ShmDir, Need: int64(size), Free: free, Slots: spec.Slots})
		}
		return fail(fmt.Errorf("cudafeed: reserving %d bytes for %s: %w", size, path, err))
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("cudafeed: mapping %s (%d bytes): %w", path, size, err))
	}
	r := &Ring{path: path, spec: spec, fields: fields, slotBytes: slotBytes, batch: batch, mem: mem}
	r.slots = make([][][]byte, spec.Slots)
	for i := range r.slots {
		r.slots[i] = make([][]byte, len(fields))
		base := i * slotBytes
		for f, fi := range fields {
			lo := base + fi.Offset
			r.slots[i][f] = mem[lo : lo+fi.Bytes : lo+fi.Bytes]
		}
	}
	return r, nil
}

// ringPrefix begins the name of every ring CreateServerRing makes:
// ffcvfeed-PID-RANDOM.
const ringPrefix = "ffcvfeed-"

// CreateServerRing creates a ring under a name nobody can guess or plant
// ahead of it, ffcvfeed-PID-RANDOM (128 random bits), created exclusively
// and retried under a new name if one exists all the same. The PID in the
// name lets CleanStaleRings find the rings of servers that died.
func CreateServerRing(spec RingSpec) (*Ring, error) {
	var err error
	for range 8 {
		var b [16]byte
		if _, rerr := rand.Read(b[:]); rerr != nil {
			return nil, fmt.Errorf("cudafeed: choosing a ring name: %w", rerr)
		}
		var r *Ring
		r, err = CreateRing(fmt.Sprintf("%s%d-%s", ringPrefix, os.Getpid(), hex.EncodeToString(b[:])), spec)
		if !errors.Is(err, ErrExists) {
			return r, err
		}
	}
	return nil, err
}

// CleanStaleRings removes the rings in ShmDir that servers of this user
// left when they died (SIGKILL, a crash): files named ffcvfeed-PID-… or
// ffcvfeed-PID, owned by this user, whose PID is no running process. It
// never touches another user's files, nor those of a live PID. It returns
// the paths removed.
func CleanStaleRings() ([]string, error) {
	ents, err := os.ReadDir(ShmDir)
	if err != nil {
		return nil, err
	}
	uid := uint32(os.Getuid())
	var removed []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), ringPrefix)
		if !ok || !e.Type().IsRegular() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid <= 0 {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		if st, ok := info.Sys().(*syscall.Stat_t); !ok || st.Uid != uid {
			continue
		}
		if err := unix.Kill(pid, 0); !errors.Is(err, unix.ESRCH) {
			continue // alive (or not ours to signal): in use, maybe
		}
		path := ShmDir + "/" + e.Name()
		if err := os.Remove(path); err == nil {
			removed = append(removed, path)
		}
	}
	return removed, nil
}

// Path returns the shared-memory file's path.
func (r *Ring) Path() string { return r.path }

// Slots returns the number of slots.
func (r *Ring) Slots() int { return len(r.slots) }

// SlotBytes returns the size of one slot, a multiple of Alignment.
func (r *Ring) SlotBytes() int { return r.slotBytes }

// BatchSize returns the batch dimension shared by every field.
func (r *Ring) BatchSize() int { return r.batch }

// Fields returns the fields' places inside a slot.
func (r *Ring) Fields() []FieldInfo { return r.fields }

// Slot returns slot i's field regions, in the spec's order. The slices are
// computed once; calling Slot allocates nothing.
func (r *Ring) Slot(i int) [][]byte { return r.slots[i] }

// Close unmaps and unlinks the shared-memory file. Consumers that mapped it
// keep their mapping until they unmap it.
func (r *Ring) Close() error {
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	r.slots = nil
	if uerr := unix.Unlink(r.path); uerr != nil && !errors.Is(uerr, os.ErrNotExist) && err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("cudafeed: closing %s: %w", r.path, err)
	}
	return nil
}
