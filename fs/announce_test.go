package fs

import (
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRemoveStale: the announce folders of mounts that were killed (a
// socket bound over a minute ago that refuses connections, alone in an
// ffcvfs-* folder of the user's, 0700) are removed; a live socket's, a
// young one's, a folder with anything else in it, other names and other
// modes stay.
func TestRemoveStale(t *testing.T) {
	parent := t.TempDir()
	old := time.Now().Add(-2 * staleAge)
	mk := func(name string, mode os.FileMode, listen bool, bound time.Time, extra bool) {
		t.Helper()
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		sock := filepath.Join(dir, announceSocketName)
		ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		if listen {
			t.Cleanup(func() { ln.Close() })
		} else {
			ln.SetUnlinkOnClose(false)
			ln.Close()
		}
		if err := os.Chtimes(sock, bound, bound); err != nil {
			t.Fatal(err)
		}
		if extra {
			if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("ffcvfs-dead", 0o700, false, old, false)
	mk("ffcvfs-dead2", 0o700, false, old, false)
	mk("ffcvfs-live", 0o700, true, old, false)
	mk("ffcvfs-young", 0o700, false, time.Now(), false)
	mk("ffcvfs-full", 0o700, false, old, true)
	mk("ffcvfs-open", 0o755, false, old, false)
	mk("other-dead", 0o700, false, old, false)
	if n := removeStale(parent, time.Now()); n != 2 {
		t.Errorf("removed %d folders, want 2", n)
	}
	for name, want := range map[string]bool{"ffcvfs-dead": false, "ffcvfs-dead2": false, "ffcvfs-live": true,
		"ffcvfs-young": true, "ffcvfs-full": true, "ffcvfs-open": true, "other-dead": true} {
		_, err := os.Stat(filepath.Join(parent, name, announceSocketName))
		if (err == nil) != want {
			t.Errorf("%s: socket there %v, want %v", name, err == nil, want)
		}
	}
}
