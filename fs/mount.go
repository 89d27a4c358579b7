package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ffcvfs/ffcvfs/fs/transport"
)

// MountOptions configures Mount.
type MountOptions struct {
	// FsName appears as the mount's source in /proc/mounts (the beton's
	// name, without credentials).
	FsName string
	// AllowOther lets other users read the mount (needs user_allow_other
	// in /etc/fuse.conf when not root).
	AllowOther bool
	// Debug logs every FUSE request.
	Debug bool
	// SourcePath, when the beton is a local file, is checked not to lie
	// under the mountpoint: the server would then read its own mount.
	SourcePath string
}

// Mount serves v at dir until the returned server is unmounted.
func Mount(dir string, v *View, opts MountOptions) (*transport.Server, error) {
	if err := transport.CheckFUSE(); err != nil {
		return nil, err
	}
	if err := transport.CheckMountpoint(dir); err != nil {
		return nil, err
	}
	abs, _ := filepath.Abs(dir)
	if opts.SourcePath != "" {
		src, _ := filepath.Abs(opts.SourcePath)
		if src == abs || strings.HasPrefix(src, abs+"/") {
			return nil, fmt.Errorf("the beton %s lies under the mountpoint %s: the mount would read itself", opts.SourcePath, dir)
		}
	}
	t := v.opts.Timeout
	mo := fuse.MountOptions{
		FsName:       opts.FsName,
		Name:         "ffcvfs",
		Debug:        opts.Debug,
		AllowOther:   opts.AllowOther,
		MaxReadAhead: 1 << 20,
		// A READ of up to 1 MiB (max_pages 256, Linux 4.20): one for
		// nearly any image file.
		MaxWrite:           1 << 20,
		DisableXAttrs:      true,
		DisableReadDirPlus: true,
		// The kernel checks permission bits: every file is 0444. The
		// superblock is read-only too (mountFUSE).
		Options: []string{"default_permissions"},
	}
	if v.opts.Compat.SmallReads {
		mo.MaxWrite = 128 << 10
		mo.MaxReadAhead = 128 << 10
	}
	// Every node sets its own entry and attribute timeouts (View.entry,
	// and Getattr): go-fuse would put its defaults in place of a timeout
	// of 0, which snapshot files need. Node IDs are the inode numbers, so
	// that invalidations (kernelCopies) can name a file by its number.
	raw := gofs.NewNodeFS(v.Root(), &gofs.Options{
		MountOptions:    mo,
		NegativeTimeout: &t,
		UID:             v.opts.Owner,
		GID:             uint32(os.Getgid()),
		ExternalNodeID:  true,
	})
	srv, err := transport.Serve(abs, countingFS{RawFileSystem: raw, v: v}, mo)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", dir, err)
	}
	init := srv.KernelSettings()
	v.protocol = fmt.Sprintf("%d.%d", init.Major, init.Minor)
	if init.Flags64()&fuse.CAP_NO_OPEN_SUPPORT != 0 && !v.opts.Compat.Opens {
		v.noOpen.Store(true)
		if !v.opts.KernelCache {
			v.kcopies.start(srv.Invalidate)
		}
	}
	return srv, nil
}
