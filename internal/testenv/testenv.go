// Package testenv finds what tests need outside the repository (the shared
// fixtures, system tools) and decides what a missing prerequisite means: a
// skip on a developer's machine, a failure in CI (CI=true), where nothing may
// be skipped.
package testenv

import (
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Patience is how long a test waits for a condition (a mount to appear, a
// process to exit, a counter to reach a value) before it fails. Long,
// because a training machine, and so CI, is busy: a condition that holds
// ends the wait at once, so only a failing test pays it.
const Patience = 3 * time.Minute

// InCI reports whether the tests run in CI, where missing prerequisites fail.
func InCI() bool { return os.Getenv("CI") == "true" }

// Missing ends the test for a missing prerequisite: t.Fatal in CI, t.Skip
// elsewhere.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf("prerequisite missing (CI=true, so this fails): "+format, args...)
	}
	t.Skipf("prerequisite missing: "+format, args...)
}

// SharedDir returns the shared folder beside the repository: $FFCVFS_SHARED,
// or the first "shared" folder holding "fixtures" found walking up from the
// working directory.
func SharedDir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("FFCVFS_SHARED"); d != "" {
		return d
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		cand := filepath.Join(dir, "shared")
		if st, err := os.Stat(filepath.Join(cand, "fixtures")); err == nil && st.IsDir() {
			return cand
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			Missing(t, "no shared/fixtures folder above the working directory; set FFCVFS_SHARED")
			return ""
		}
		dir = parent
	}
}

// Fixture returns the path of a file or folder under shared/fixtures.
func Fixture(t testing.TB, elem ...string) string {
	t.Helper()
	p := filepath.Join(append([]string{SharedDir(t), "fixtures"}, elem...)...)
	if _, err := os.Stat(p); err != nil {
		Missing(t, "fixture %s: %v", p, err)
	}
	return p
}

// LookPath returns the path of an executable, or ends the test via Missing.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, "%s not found on PATH", name)
	}
	return p
}

// Gunzip decompresses the gzip file at path into the test's temporary
// folder and returns the path of the result.
func Gunzip(t testing.TB, path string) string {
	t.Helper()
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	z, err := gzip.NewReader(in)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(path), ".gz"))
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(f, z); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}
