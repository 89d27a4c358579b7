package tier

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A disk tier's folder holds one subfolder per source version, named by
// the first 8 bytes of the SHA-256 of the source's identity (its URL with
// ETag, or its path with size and modification time):
//
//	DIR/<id>/meta.json   source name, identity, page size, pages
//	DIR/<id>/lock        held (flock) by the process that writes <id>
//	DIR/<id>/p<page>     one entry per data page
//
// Entries are written to a temporary file and renamed, so a reader sees a
// whole entry or none; a crash leaves at worst a torn entry, which its
// checksums reject.

const metaName = "meta.json"

// meta is what meta.json says.
type meta struct {
	Version  int    `json:"version"`
	Source   string `json:"source"`
	Identity string `json:"identity"`
	PageSize int64  `json:"page_size"`
	Pages    int    `json:"pages"`
}

// Object is what a disk tier needs to know of the object it caches.
type Object struct {
	// Name names it in messages and listings; never with credentials.
	Name string
	// Identity changes whenever its bytes may have: URL and ETag, or path,
	// size and modification time. Entries of another identity are never
	// read.
	Identity string
}

func idOf(identity string) (uint64, string) {
	h := sha256.Sum256([]byte(identity))
	return binary.LittleEndian.Uint64(h[:8]), hex.EncodeToString(h[:8])
}

// OpenDisk opens the disk tier of src in dir, creating what is missing
// (folders 0700, files 0600). Entries already there serve reads at once:
// a second mount of the same object starts warm. When another process
// holds the folder of src, the tier only reads (state "shared"). Entries
// of older versions of src (same name, another identity) that no process
// holds are removed.
func OpenDisk(dir string, src Object, geom Geometry, opts Options) (*Store, error) {
	if src.Identity == "" {
		return nil, fmt.Errorf("%s has no version to key a disk cache by (no ETag, Last-Modified or modification time): a changed object could not be told from the cached one", src.Name)
	}
	if err := ownDir(dir, true); err != nil {
		return nil, err
	}
	id, hexID := idOf(src.Identity)
	sub := filepath.Join(dir, hexID)
	if err := ownDir(sub, false); err != nil {
		if !errors.Is(err, errForeign) {
			return nil, err
		}
		// Planted by another user while the folder was open to others:
		// moved aside (the parent is this user's), never used.
		aside := filepath.Join(dir, fmt.Sprintf(".foreign-%s-%d", hexID, time.Now().UnixNano()))
		if rerr := os.Rename(sub, aside); rerr != nil {
			return nil, fmt.Errorf("%w; moving it aside failed: %v", err, rerr)
		}
		logger := opts.Logger
		if logger == nil {
			logger = slog.Default()
		}
		logger.Warn("disk cache: a folder of another user was in the cache folder; moved it aside, unused (remove it as root)", "folder", aside)
		if err := ownDir(sub, false); err != nil {
			return nil, err
		}
	}
	lock, err := os.OpenFile(filepath.Join(sub, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("disk cache: %w", err)
	}
	shared := false
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			lock.Close()
			return nil, fmt.Errorf("disk cache: locking %s: %w", sub, err)
		}
		shared = true
	}
	be := &diskBackend{dir: sub, lock: lock}
	s := newStore("disk", sub, geom, opts, id, be, shared)
	if shared {
		s.opts.Logger.Info("disk cache: another process writes this folder; this one reads its pages and writes none", "dir", sub)
		return s, nil
	}
	m := meta{Version: entryVersion, Source: src.Name, Identity: src.Identity, PageSize: geom.PageSize, Pages: geom.NumPages}
	if err := writeMeta(sub, m); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.scan(); err != nil {
		s.Close()
		return nil, err
	}
	removeOlder(dir, hexID, m, s.opts)
	return s, nil
}

// ownDir makes sure dir is a folder of this user that no one else can
// enter, creating it (and, with parents, its parents) when missing.
func ownDir(dir string, parents bool) error {
	var err error
	if parents {
		err = os.MkdirAll(dir, 0o700)
	} else {
		err = os.Mkdir(dir, 0o700)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("disk cache: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("disk cache: %s is not a folder", dir)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("disk cache: %s belongs to user %d, not to this one (%d); give a folder of your own: %w", dir, sys.Uid, os.Getuid(), errForeign)
	}
	// A version folder is this user's alone. The cache folder may be
	// readable by others, but no one else may write it: another user could
	// plant version folders and entries in it. Tightened, since it is ours.
	perm, want := st.Mode().Perm(), st.Mode().Perm()&^0o022
	if !parents {
		want = 0o700
	}
	if !parents && perm&0o077 != 0 || parents && perm&0o022 != 0 {
		if err := os.Chmod(dir, want); err != nil {
			return fmt.Errorf("disk cache: %w", err)
		}
	}
	return nil
}

// errForeign marks a folder of the disk cache that another user owns.
var errForeign = errors.New("a folder of another user")

func writeMeta(sub string, m meta) error {
	b, _ := json.MarshalIndent(m, "", "  ")
	tmp := filepath.Join(sub, ".tmp-meta")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(sub, metaName)); err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	return nil
}

func readMeta(sub string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(sub, metaName))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	return m, err
}

// scan takes stock of the entries in the folder, oldest first in the LRU
// order, removes leftovers of interrupted writes and entries that are not
// pages of this source, and evicts down to the budget.
func (s *Store) scan() error {
	des, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	type found struct {
		e   *entry
		mod time.Time
	}
	var es []found
	for _, de := range des {
		name := de.Name()
		path := filepath.Join(s.dir, name)
		if strings.HasPrefix(name, ".tmp-") {
			os.Remove(path)
			continue
		}
		if !strings.HasPrefix(name, "p") {
			continue
		}
		dp, err := strconv.Atoi(name[1:])
		info, ierr := de.Info()
		if err != nil || dp < 0 || dp >= s.geom.NumPages || ierr != nil || !info.Mode().IsRegular() {
			os.Remove(path)
			continue
		}
		es = append(es, found{&entry{dp: int32(dp), n: info.Size(), size: blocks(info.Size())}, info.ModTime()})
	}
	slices.SortFunc(es, func(a, b found) int { return a.mod.Compare(b.mod) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range es {
		e := f.e
		e.elem = s.lru.PushFront(e)
		s.entries[e.dp] = e
		s.used += e.size
		s.raw += s.geom.PageSize
		s.stored += e.n
	}
	for s.used > s.opts.Budget && s.lru.Len() > 0 {
		s.drop(s.lru.Back().Value.(*entry))
		s.st.Evictions++
	}
	return nil
}

// removeOlder removes the folders of other versions of the same source
// that no process holds.
func removeOlder(dir, keep string, m meta, opts Options) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, de := range des {
		if !de.IsDir() || de.Name() == keep {
			continue
		}
		sub := filepath.Join(dir, de.Name())
		old, err := readMeta(sub)
		if err != nil || old.Source != m.Source || old.Identity == m.Identity {
			continue
		}
		if n, err := removeFolder(sub); err == nil {
			opts.Logger.Info("disk cache: removed the pages of an older version of the source", "source", m.Source, "dir", sub, "bytes", n)
		}
	}
}

// errInUse: a process holds the folder.
var errInUse = errors.New("in use by a running mount")

// removeFolder removes a tier folder unless a process holds it, and
// returns the bytes it freed.
func removeFolder(sub string) (int64, error) {
	lock, err := os.OpenFile(filepath.Join(sub, "lock"), os.O_RDWR, 0)
	if err == nil {
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			return 0, errInUse
		}
	}
	n, _ := folderBytes(sub)
	return n, os.RemoveAll(sub)
}

func folderBytes(sub string) (int64, int) {
	des, _ := os.ReadDir(sub)
	var n int64
	k := 0
	for _, de := range des {
		if info, err := de.Info(); err == nil && strings.HasPrefix(de.Name(), "p") {
			n += blocks(info.Size())
			k++
		}
	}
	return n, k
}

// Folder is one source version's part of a disk cache folder.
type Folder struct {
	ID       string    `json:"id"`
	Source   string    `json:"source"`
	Identity string    `json:"identity"`
	Entries  int       `json:"entries"`
	Bytes    int64     `json:"bytes"`
	Pages    int       `json:"pages"` // the source's data pages
	Modified time.Time `json:"modified"`
	InUse    bool      `json:"in_use"`
}

// List describes the source versions cached in dir, most recently
// written first.
func List(dir string) ([]Folder, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Folder
	for _, de := range des {
		sub := filepath.Join(dir, de.Name())
		m, err := readMeta(sub)
		if !de.IsDir() || err != nil {
			continue
		}
		f := Folder{ID: de.Name(), Source: m.Source, Identity: m.Identity, Pages: m.Pages}
		f.Bytes, f.Entries = folderBytes(sub)
		if info, err := os.Stat(sub); err == nil {
			f.Modified = info.ModTime()
		}
		if lock, err := os.OpenFile(filepath.Join(sub, "lock"), os.O_RDWR, 0); err == nil {
			if syscall.Flock(int(lock.Fd()), syscall.LOCK_SH|syscall.LOCK_NB) != nil {
				f.InUse = true
			}
			lock.Close()
		}
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b Folder) int { return cmp.Or(b.Modified.Compare(a.Modified), strings.Compare(a.ID, b.ID)) })
	return out, nil
}

// Remove removes the cached pages of the source version id from dir, or
// of all versions no process holds when id is "". It returns the bytes
// freed; a version in use is an error.
func Remove(dir, id string) (int64, error) {
	fs, err := List(dir)
	if err != nil {
		return 0, err
	}
	var total int64
	var errs []error
	found := false
	for _, f := range fs {
		if id != "" && f.ID != id {
			continue
		}
		found = true
		n, err := removeFolder(filepath.Join(dir, f.ID))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", f.ID, f.Source, err))
			continue
		}
		total += n
	}
	if id != "" && !found {
		return 0, fmt.Errorf("%s: no cached source %q", dir, id)
	}
	return total, errors.Join(errs...)
}

// diskBackend keeps entries as files. It keeps up to maxOpenFiles of
// them open between reads: opening and closing a file per read was 8 % of
// the mount's CPU when a random order reads sample by sample from the
// tier.
type diskBackend struct {
	dir  string
	lock *os.File

	mu    sync.Mutex
	files map[int32]*openFile // guarded by mu
}

// maxOpenFiles bounds the entry files a disk tier keeps open.
const maxOpenFiles = 256

// openFile is an entry's file kept open, and its readers now.
type openFile struct {
	f     *os.File
	users int  // guarded by diskBackend.mu
	gone  bool // no longer kept: closed by its last user
}

func (d *diskBackend) path(dp int32) string { return filepath.Join(d.dir, "p"+strconv.Itoa(int(dp))) }

// open returns page dp's entry file, kept open or opened, for one user.
func (d *diskBackend) open(dp int32) (*openFile, error) {
	d.mu.Lock()
	if of := d.files[dp]; of != nil {
		of.users++
		d.mu.Unlock()
		return of, nil
	}
	d.mu.Unlock()
	f, err := os.Open(d.path(dp))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if of := d.files[dp]; of != nil { // opened meanwhile
		f.Close()
		of.users++
		return of, nil
	}
	of := &openFile{f: f, users: 1}
	if d.files == nil {
		d.files = map[int32]*openFile{}
	}
	if len(d.files) >= maxOpenFiles {
		for k, o := range d.files { // any one: map order is random
			d.forget(k, o)
			break
		}
	}
	d.files[dp] = of
	return of, nil
}

// done ends a user of of.
func (d *diskBackend) done(of *openFile) {
	d.mu.Lock()
	defer d.mu.Unlock()
	of.users--
	if of.gone && of.users == 0 {
		of.f.Close()
	}
}

// forget stops keeping dp's file open; its last user closes it. Called
// with mu held.
func (d *diskBackend) forget(dp int32, of *openFile) {
	delete(d.files, dp)
	of.gone = true
	if of.users == 0 {
		of.f.Close()
	}
}

// drop forgets page dp's file, if kept: its entry is replaced or removed.
func (d *diskBackend) drop(dp int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if of := d.files[dp]; of != nil {
		d.forget(dp, of)
	}
}

func (d *diskBackend) read(e *entry, p []byte, off int64) error {
	of, err := d.open(e.dp)
	if err != nil {
		return err
	}
	defer d.done(of)
	n, err := of.f.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == io.EOF {
		return fmt.Errorf("%w: the entry ends at byte %d", ErrCorrupt, off+int64(n))
	}
	return err
}

func (d *diskBackend) write(e *entry, data []byte) error {
	var r [8]byte
	rand.Read(r[:])
	tmp := filepath.Join(d.dir, ".tmp-"+hex.EncodeToString(r[:]))
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		d.drop(e.dp) // an earlier entry's file is not read for this one
		err = os.Rename(tmp, d.path(e.dp))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func (d *diskBackend) remove(e *entry) {
	d.drop(e.dp)
	os.Remove(d.path(e.dp))
}

func (d *diskBackend) lookup(dp int32) *entry {
	info, err := os.Stat(d.path(dp))
	if err != nil || !info.Mode().IsRegular() {
		return nil
	}
	return &entry{dp: dp, n: info.Size(), size: blocks(info.Size())}
}

func (d *diskBackend) close() {
	d.mu.Lock()
	for dp, of := range d.files {
		d.forget(dp, of)
	}
	d.mu.Unlock()
	d.lock.Close()
}
