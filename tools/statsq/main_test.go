package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestStatsq: paths, alternatives, sums and optional paths read what a
// stats.json holds; an absent path, a file that is no JSON or is far too
// large, and a missing mount are errors naming the file.
func TestStatsq(t *testing.T) {
	mnt := t.TempDir()
	os.Mkdir(filepath.Join(mnt, ".ffcvfs"), 0o700)
	file := filepath.Join(mnt, ".ffcvfs", "stats.json")
	os.WriteFile(file, []byte(`{"cache":{"bytes_read":12,"budget_bytes":1048576,"wait":0.5},"peers":{"cache_bytes":2097152},"fuse":{"requests":{"READ":5}}}`), 0o600)
	for _, c := range []struct {
		exprs []string
		want  string
	}{
		{[]string{"cache.bytes_read"}, "12"},
		{[]string{"peers.storage_bytes|cache.bytes_read"}, "12"},
		{[]string{"cache.budget_bytes+peers.cache_bytes?", "cache.budget_bytes+nope?"}, "3145728 1048576"},
		{[]string{"fuse.requests", "cache.wait", "absent.path?"}, `{"READ":5} 0.5 0`},
	} {
		for _, where := range []string{mnt, file} {
			if got, err := run(where, c.exprs); err != nil || got != c.want {
				t.Errorf("statsq %s %v = %q, %v; want %q", where, c.exprs, got, err, c.want)
			}
		}
	}
	for _, c := range []struct {
		where, content, expr, want string
	}{
		{mnt, "", "cache.absent", "not in the file"},
		{mnt, "", "fuse.requests+cache.bytes_read", "is not a number"},
		{filepath.Join(t.TempDir(), "nothing"), "", "a", "no such file"},
		{mnt, "{not json", "a", "stats.json"},
		{mnt, strings.Repeat(" ", maxStats+1), "a", "more than a stats.json holds"},
	} {
		if c.content != "" {
			os.WriteFile(file, []byte(c.content), 0o600)
		}
		if _, err := run(c.where, []string{c.expr}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("statsq %s %s: %v, want an error saying %q", c.where, c.expr, err, c.want)
		}
	}
}
