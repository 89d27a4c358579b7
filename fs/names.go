package fs

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"

	"github.com/ffcvfs/ffcvfs/control"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// namedTree is the tree of a beton that keeps its files' paths
// (beton.PathField): the folders and files it was written from, under
// their names. Folder 0 is the root; the class folders are its children.
type namedTree struct {
	dirs []namedDir
	base []string // file name of each sample
}

// namedDir is one folder: its entries sorted by name, each a folder
// (dir ≥ 0) or a sample file.
type namedDir struct {
	names   []string
	entries []namedEntry
}

type namedEntry struct {
	dir    int    // folder index, or -1 for a file
	sample uint32 // for a file
}

// walkKey orders samples as torchvision's make_dataset walks a class
// folder: by class, then by the path of the folder that holds the file
// (sorted(os.walk(...)) compares the folders' paths as strings), then by
// file name.
type walkKey struct {
	class, dir, base string
}

// buildNamed makes the view's tree from each sample's path: class folders
// are the paths' first parts; the ImageFolder indices follow the walk
// ImageFolder will make of that tree.
func (v *View) buildNamed(paths []string) error {
	f := v.f
	n := len(paths)
	keys := make([]walkKey, n)
	for s, p := range paths {
		parts := strings.Split(p, "/")
		if len(parts) < 2 {
			return fmt.Errorf("%s: sample %d is named %q, which lies in no class folder: serve it without its names (--no-file-names)", f.Name(), s, p)
		}
		for _, c := range parts {
			if c == "" || c == "." || c == ".." || len(c) > 255 || strings.ContainsRune(c, 0) {
				return fmt.Errorf("%s: sample %d is named %q, which is not a relative path of plain names: serve it without its names (--no-file-names)", f.Name(), s, p)
			}
		}
		if parts[0] == control.Dir {
			return fmt.Errorf("%s: sample %d is named %q: its class folder would hide the mount's %s folder", f.Name(), s, p, control.Dir)
		}
		keys[s] = walkKey{class: parts[0], dir: strings.Join(parts[:len(parts)-1], "/"), base: parts[len(parts)-1]}
	}
	order := make([]uint32, n)
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(a, b uint32) int {
		ka, kb := keys[a], keys[b]
		return cmp.Or(cmp.Compare(ka.class, kb.class), cmp.Compare(ka.dir, kb.dir), cmp.Compare(ka.base, kb.base), cmp.Compare(a, b))
	})
	t := &namedTree{dirs: []namedDir{{}}, base: make([]string, n)}
	dirOf := map[string]int{"": 0}
	// dir returns the index of folder path, making it and its parents.
	var dir func(path string) int
	dir = func(path string) int {
		if d, ok := dirOf[path]; ok {
			return d
		}
		parent, name := "", path
		if i := strings.LastIndexByte(path, '/'); i >= 0 {
			parent, name = path[:i], path[i+1:]
		}
		p := dir(parent)
		d := len(t.dirs)
		t.dirs = append(t.dirs, namedDir{})
		dirOf[path] = d
		t.dirs[p].names = append(t.dirs[p].names, name)
		t.dirs[p].entries = append(t.dirs[p].entries, namedEntry{dir: d})
		return d
	}
	var classes []string
	var members [][]uint32
	for i, s := range order {
		k := keys[s]
		if i > 0 && paths[order[i-1]] == paths[s] {
			return fmt.Errorf("%s: samples %d and %d are both named %q: serve it without its names (--no-file-names)", f.Name(), order[i-1], s, paths[s])
		}
		if len(classes) == 0 || classes[len(classes)-1] != k.class {
			classes = append(classes, k.class)
			members = append(members, nil)
		}
		members[len(members)-1] = append(members[len(members)-1], s)
		d := dir(k.dir)
		t.dirs[d].names = append(t.dirs[d].names, k.base)
		t.dirs[d].entries = append(t.dirs[d].entries, namedEntry{dir: -1, sample: s})
		t.base[s] = k.base
	}
	for di := range t.dirs {
		d := &t.dirs[di]
		idx := make([]int, len(d.names))
		for i := range idx {
			idx[i] = i
		}
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(d.names[a], d.names[b]) })
		names, entries := make([]string, len(idx)), make([]namedEntry, len(idx))
		for i, j := range idx {
			names[i], entries[i] = d.names[j], d.entries[j]
			if i > 0 && names[i] == names[i-1] {
				return fmt.Errorf("%s: %q is both a file and a folder among the samples' names: serve it without its names (--no-file-names)", f.Name(), names[i])
			}
		}
		d.names, d.entries = names, entries
	}
	v.setClasses(classes, members)
	v.labelOf = make([]int64, len(classes))
	v.named = t
	v.idWidth = len(fmt.Sprint(max(n-1, 0)))
	return nil
}

// lookup finds name in folder d.
func (t *namedTree) lookup(d int, name string) (namedEntry, bool) {
	i, ok := slices.BinarySearch(t.dirs[d].names, name)
	if !ok {
		return namedEntry{}, false
	}
	return t.dirs[d].entries[i], true
}

// namedDirNode is a folder of a named tree.
type namedDirNode struct {
	gofs.Inode
	readOnlyDir
	v   *View
	dir int
}

var (
	_ = (gofs.NodeLookuper)((*namedDirNode)(nil))
	_ = (gofs.NodeReaddirer)((*namedDirNode)(nil))
	_ = (gofs.NodeGetattrer)((*namedDirNode)(nil))
)

func (n *namedDirNode) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.v.dirAttr(&out.Attr, inoClass+uint64(n.dir), 0o555)
	out.SetTimeout(n.v.opts.Timeout)
	return 0
}

func (n *namedDirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	return namedList(n.v.named, n.dir), 0
}

// namedList lists folder d.
func namedList(t *namedTree, d int) gofs.DirStream {
	dir := t.dirs[d]
	list := make([]fuse.DirEntry, len(dir.names))
	for i, name := range dir.names {
		if e := dir.entries[i]; e.dir >= 0 {
			list[i] = fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: inoClass + uint64(e.dir)}
		} else {
			list[i] = fuse.DirEntry{Name: name, Mode: syscall.S_IFREG, Ino: inoSample + uint64(e.sample)}
		}
	}
	return gofs.NewListDirStream(list)
}

func (n *namedDirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return namedLookup(ctx, &n.Inode, n.v, n.dir, name, out)
}

// namedLookup looks name up in folder d of the view's named tree.
func namedLookup(ctx context.Context, parent *gofs.Inode, v *View, d int, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	e, ok := v.named.lookup(d, name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if e.dir >= 0 {
		ino := inoClass + uint64(e.dir)
		v.dirAttr(&out.Attr, ino, 0o555)
		v.entry(out)
		return parent.NewInode(ctx, &namedDirNode{v: v, dir: e.dir}, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: ino}), 0
	}
	return v.sampleEntry(ctx, parent, int(e.sample), out)
}
