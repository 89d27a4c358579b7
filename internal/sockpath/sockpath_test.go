package sockpath

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParent: a folder whose socket path fits is taken as it is; one too
// long gives way to $XDG_RUNTIME_DIR, then $TMPDIR, then /tmp; a path that
// does not fit is refused with its length and what to do.
func TestParent(t *testing.T) {
	short := t.TempDir()
	long := filepath.Join(short, strings.Repeat("d", 120))
	if err := os.MkdirAll(long, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	t.Setenv("TMPDIR", long)
	extra := len("/ffcvfs-1234567890/announce.sock")
	if len(short)+extra <= Max {
		if got, err := Parent(extra, short); err != nil || got != short {
			t.Errorf("Parent(%s): %q, %v; want it as it is", short, got, err)
		}
	}
	if got, err := Parent(extra, long); err != nil || got != "/tmp" {
		t.Errorf("Parent(a folder of %d bytes), TMPDIR as long: %q, %v; want /tmp", len(long), got, err)
	}
	t.Setenv("XDG_RUNTIME_DIR", short)
	if len(short)+extra <= Max {
		if got, err := Parent(extra, long); err != nil || got != short {
			t.Errorf("with XDG_RUNTIME_DIR=%s: %q, %v", short, got, err)
		}
	}
	// A missing candidate is passed over.
	t.Setenv("XDG_RUNTIME_DIR", filepath.Join(short, "missing"))
	if got, err := Parent(extra, filepath.Join(short, "gone")); err != nil || got != "/tmp" {
		t.Errorf("missing folders: %q, %v; want /tmp", got, err)
	}
	if _, err := Parent(Max); err == nil {
		t.Error("Parent with no room at all: no error")
	}
	err := Check("the socket", filepath.Join(long, "feed.sock"))
	if err == nil || !strings.Contains(err.Error(), "bytes long, more than the 107") || !strings.Contains(err.Error(), "TMPDIR") {
		t.Errorf("Check of a long path: %v", err)
	}
	if err := Check("the socket", "/tmp/feed.sock"); err != nil {
		t.Errorf("Check of a short path: %v", err)
	}
}
