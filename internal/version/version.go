// Package version says which build of ffcvfs and ffcvfeed is running: the
// release, the commit it was built from, and the Go toolchain, for
// `ffcvfs version`, `ffcvfeed version` and --version, so that a report of
// a problem says what ran.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

// Release is the version of this source tree; python/pyproject.toml gives
// the Python package the same (a test checks).
const Release = "0.1.0"

// commit may be set at link time (-ldflags "-X
// github.com/ffcvfs/ffcvfs/internal/version.commit=...") by builds made
// outside a git checkout; otherwise it comes from the build's VCS stamp.
var commit string

// Commit returns the commit the program was built from, with "+modified"
// when the tree had uncommitted changes, or "unknown".
func Commit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "+modified"
			}
		}
	}
	if rev == "" {
		return "unknown"
	}
	return rev + modified
}

// String is the report of `PROGRAM version`: one line of release and
// commit, one of the toolchain and platform, and the extra lines given
// (what the build's C code uses on this CPU, say).
func String(program string, extra ...string) string {
	lines := []string{
		fmt.Sprintf("%s %s (commit %s)", program, Release, Commit()),
		fmt.Sprintf("built with %s for %s/%s", runtime.Version(), runtime.GOOS, runtime.GOARCH),
	}
	return strings.Join(append(lines, extra...), "\n") + "\n"
}
