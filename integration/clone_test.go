package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestFreshClone: a clone of the repository is the whole project. In a
// clone made in a temporary folder, with no shared/ folder above it and
// none of the variables that once pointed outside, go test passes for
// every package whose tests read fixtures (found by grepping the clone
// for testenv.Fixture), and nothing in it looks for test data outside it.
// What the clone holds is what was committed.
func TestFreshClone(t *testing.T) {
	git := testenv.LookPath(t, "git")
	root := testenv.RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, ".git")); err != nil {
		testenv.Missing(t, "%s is not a git checkout, so there is nothing to clone", root)
	}
	dir := t.TempDir()
	for d := dir; d != filepath.Dir(d); d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "shared")); err == nil {
			t.Fatalf("%s has a shared/ folder above it: the clone would not stand alone", dir)
		}
	}
	clone := filepath.Join(dir, "ffcvfs")
	if out, err := exec.Command(git, "clone", "--quiet", "--no-hardlinks", root, clone).CombinedOutput(); err != nil {
		t.Fatalf("git clone: %v\n%s", err, out)
	}

	// Nothing points outside the repository for test data: neither the
	// variable nor the folder that once did (spelt here in two parts, so
	// that this file does not match itself).
	oldVar, oldDir := "FFCVFS_"+"SHARED", ".."+"/shared"
	grep := exec.Command(git, "grep", "-n", "-F", "-e", oldVar, "-e", oldDir, "--", "*.go", "*.sh", "*.py", "*.md")
	grep.Dir = clone
	if out, _ := grep.Output(); len(out) > 0 {
		t.Errorf("the repository still looks for test data outside it:\n%s", out)
	}

	// The packages whose tests read fixtures.
	grep = exec.Command(git, "grep", "-l", "testenv.Fixture(", "--", "*_test.go")
	grep.Dir = clone
	out, err := grep.Output()
	if err != nil {
		t.Fatalf("git grep: %v", err)
	}
	pkgs := map[string]bool{}
	for _, f := range strings.Fields(string(out)) {
		if d := filepath.Dir(f); d != "integration" { // this package runs here already
			pkgs["./"+d] = true
		}
	}
	var list []string
	for p := range pkgs {
		list = append(list, p)
	}
	sort.Strings(list)
	if len(list) < 5 {
		t.Fatalf("found %d packages with fixtures (%v), want the format, mount and decode packages", len(list), list)
	}
	// -short: the same tests over less data; what is checked here is
	// that they find their fixtures.
	cmd := exec.Command("go", append([]string{"test", "-short", "-count=1"}, list...)...)
	cmd.Dir = clone
	cmd.Env = append(os.Environ(), "CI=true") // a missing fixture fails, never skips
	res, err := cmd.CombinedOutput()
	t.Logf("go test %s in a fresh clone:\n%s", strings.Join(list, " "), res)
	if err != nil {
		t.Fatalf("go test in a fresh clone: %v", err)
	}
}
