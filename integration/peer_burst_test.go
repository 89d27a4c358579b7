package integration

import (
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// writeBlobBeton writes a beton of n raw images of pseudo-random pixels,
// perPage of them in a page of ps bytes, for tests that need many pages.
func writeBlobBeton(t *testing.T, path string, n int, ps int64, perPage int) {
	t.Helper()
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	w, err := beton.Create(path, fields, n, beton.WriterOptions{PageSize: ps})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.NewChaCha8([32]byte{7})
	side := 1
	for int64(3*(side+1)*(side+1)) <= ps*3/4/int64(perPage) {
		side++
	}
	blob := make([]byte, 3*side*side)
	for i := range n {
		r.Read(blob)
		if err := w.WriteSample([]beton.Value{{Mode: beton.ModeRaw, Width: side, Height: side, Data: blob}, {Int: int64(i % 10)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPeerBurstBounded: a member holding the secret asks a node for 100
// distinct pages at once; the node serves them all, and its memory stays
// within its budgets (--cache-size and --peer-cache-size) and a bounded
// allowance for the values in flight. It held about four copies of each
// page asked (a buffer per storage read, a value buffer, groupcache's
// copy, the encoded answer): 100 pages of 2 MiB took it past 900 MB.
func TestPeerBurstBounded(t *testing.T) {
	const ps = beton.MinPageSize
	src := filepath.Join(t.TempDir(), "blobs.beton")
	writeBlobBeton(t, src, 240, ps, 1)
	secret := peerSecret(t)
	peers := peerURL(1) + "," + peerURL(2)
	node := startMount(t, nil, src, "--cache-size", "16MiB", "--peer-listen", peerAddr(1), "--peers", peers,
		"--peer-secret-file", secret, "--peer-cache-size", "64MiB")
	base, err := peakRSS(node.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(extraBinary(t, "tools/peerburst"), "-listen", peerAddr(2), "-peers", peers, "-node", peerURL(1),
		"-secret-file", secret, "-pages", "100", src).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "100 served, 0 failed") {
		t.Fatalf("peerburst: %v\n%s\nnode's log:\n%s", err, out, node.stderr)
	}
	hwm, err := peakRSS(node.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	const budgets, allowance = (16 + 64) << 20, 64 << 20
	t.Logf("%s; node's peak RSS %d MiB (%d MiB before the burst)", strings.TrimSpace(string(out)), hwm>>20, base>>20)
	if hwm > base+budgets+allowance {
		t.Errorf("the node's peak RSS reached %d MiB from %d MiB serving 100 pages of 2 MiB at once: more than its budgets (%d MiB) and %d MiB beside them",
			hwm>>20, base>>20, budgets>>20, allowance>>20)
	}
	// Still serving: its stats.json reads.
	mustStorageStats(t, node.mnt)
}
