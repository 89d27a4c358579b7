package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// maxSocketPath is the longest path a Unix socket may have (sun_path,
// less its NUL); internal/sockpath says more.
const maxSocketPath = 107

// SocketDir returns a folder of the test's own (0700, removed at its end)
// in which a Unix socket's path of up to 48 more bytes fits: t.TempDir()
// where it is short enough, else one in $XDG_RUNTIME_DIR (where the
// programs put their sockets then; scripts/test.sh sets it) or /tmp, so
// that tests pass with a $TMPDIR of any length.
func SocketDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if len(dir)+48 <= maxSocketPath {
		return dir
	}
	parent := "/tmp"
	if run := os.Getenv("XDG_RUNTIME_DIR"); run != "" && len(run)+len("/ffcvfs-test-NNNNNNNNNN")+48 <= maxSocketPath {
		if st, err := os.Stat(run); err == nil && st.IsDir() {
			parent = run
		}
	}
	dir, err := os.MkdirTemp(parent, "ffcvfs-test-")
	if err != nil {
		t.Fatalf("a folder for sockets: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// Socket returns a path for a Unix socket named name in SocketDir.
func Socket(t testing.TB, name string) string {
	t.Helper()
	return filepath.Join(SocketDir(t), name)
}
