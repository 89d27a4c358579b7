package fs

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// readOnlyDir refuses every change to a folder. go-fuse treats a missing
// Unlink, Rmdir or Rename method as success (it drops the child from its
// tree), so each must be refused explicitly.
type readOnlyDir struct{}

var (
	_ = (gofs.NodeUnlinker)((*rootNode)(nil))
	_ = (gofs.NodeRmdirer)((*classNode)(nil))
	_ = (gofs.NodeRenamer)((*ctlNode)(nil))
	_ = (gofs.NodeCreater)((*ordersNode)(nil))
	_ = (gofs.NodeSetattrer)((*sampleNode)(nil))
)

func (readOnlyDir) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EROFS }
func (readOnlyDir) Rmdir(ctx context.Context, name string) syscall.Errno  { return syscall.EROFS }
func (readOnlyDir) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EROFS
}
func (readOnlyDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnlyDir) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnlyDir) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnlyDir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}
func (readOnlyDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}
func (readOnlyDir) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

// readOnlyFile refuses attribute changes (chmod, truncate, utimes) and
// writes: without OPEN (zero-message opens) the kernel no longer asks
// before letting root open a file for writing.
type readOnlyFile struct{}

var _ = (gofs.NodeWriter)((*sampleNode)(nil))

func (readOnlyFile) Write(ctx context.Context, f gofs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return 0, syscall.EROFS
}

func (readOnlyFile) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}
