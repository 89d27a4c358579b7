package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/storage"
)

// A backend of the test's own, added as every backend is, in one file
// (storage.Register from its init): fake://PATH reads the file at PATH.
func init() {
	storage.Register(storage.Scheme{Names: []string{"fake"}, Form: "fake://PATH",
		Open: func(ctx context.Context, url string, opts storage.Options) (storage.Source, error) {
			return storage.OpenFile(strings.TrimPrefix(url, "fake://"), opts)
		}})
}

// TestRegisteredScheme: a scheme registered in one file is taken by
// --data, and --help names it among the sources, with no other file
// changed.
func TestRegisteredScheme(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	out, code := runFfcvfeed(t, "bench", "--data", "fake://"+beton, "--epochs", "1", "--workers", "1", "--resolution", "32")
	if code != 0 || !strings.Contains(out, "total: ffcvfeed bench: 200 images") {
		t.Errorf("bench --data fake://%s: exit %d\n%s", beton, code, out)
	}
	help, _ := runFfcvfeed(t, "serve", "--help")
	if !strings.Contains(help, "fake://PATH") {
		t.Errorf("serve --help does not name the registered scheme:\n%s", help)
	}
	out, code = runFfcvfeed(t, "bench", "--data", "nope://x/y.beton")
	if code == 0 || !strings.Contains(out, `unsupported URL scheme "nope"`) || !strings.Contains(out, "fake://PATH") {
		t.Errorf("an unknown scheme: exit %d, %q; want one line naming the schemes there are", code, out)
	}
}

// TestHelpFirst: serve --help and bench --help start their options with
// what every run needs, with placeholders that say what to give (the
// flags were at lines 64 and 86 of 107, each shown as "value").
func TestHelpFirst(t *testing.T) {
	for _, cmd := range []string{"serve", "bench"} {
		help, _ := runFfcvfeed(t, cmd, "--help")
		_, opts, ok := strings.Cut(help, "OPTIONS:")
		lines := strings.Fields(opts)
		if !ok || len(lines) < 5 || strings.Join(lines[:3], " ") != "Every run needs" || lines[3] != "--data" || lines[4] != "SRC" {
			t.Errorf("%s --help: its options do not start with what every run needs (--data SRC):\n%s", cmd, help)
		}
		if cmd == "serve" && !strings.Contains(opts[:min(len(opts), 600)], "--socket PATH") {
			t.Errorf("serve --help: --socket PATH is not among the first options:\n%s", help)
		}
	}
}
