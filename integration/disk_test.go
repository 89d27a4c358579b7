package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

func readTierStats(t *testing.T, mnt string) control.Stats {
	t.Helper()
	s, err := control.ReadStats(mnt)
	if err != nil || s.Cache.Tiers == nil || len(s.Cache.Tiers.Tiers) != 1 {
		t.Fatalf("stats.json: %v, tiers %+v", err, s.Cache.Tiers)
	}
	return s
}

// The disk tier over S3, through real mounts: later epochs and a second
// mount read from it and not from S3; a flipped byte in an entry is
// caught and the page fetched again; a replaced object's entries are
// never served; a second mount beside the first only reads the folder;
// the folder and its files are the user's alone; `ffcvfs cache` lists and
// clears it.
func TestDiskCacheOverS3(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "disk.beton", "2MiB")
	dir := filepath.Join(t.TempDir(), "disk-cache")
	args := []string{"--cache-size", "12MiB", "--disk-cache", dir}
	size := uint64(len(r.data))

	p := r.mount(t, r.srv.Endpoint(), r.key, args...)
	checkReadsAll(t, p.mnt, r.files, 2)
	first := readTierStats(t, p.mnt).Cache.Tiers
	checkReadsAll(t, p.mnt, r.files, 2)
	second := readTierStats(t, p.mnt).Cache.Tiers
	disk := second.Tiers[0]
	if disk.Kind != "disk" || disk.State != "on" || disk.Entries != len(r.pages) || disk.Bytes > disk.BudgetBytes {
		t.Fatalf("disk tier after two epochs: %+v, want all %d pages", disk, len(r.pages))
	}
	if got := second.StorageBytes - first.StorageBytes; got > size/100 {
		t.Errorf("second epoch read %d bytes from S3, want at most 1%% of %d", got, size)
	}
	// A second mount beside the first reads what the first stored.
	p2 := r.mount(t, r.srv.Endpoint(), r.key, args...)
	checkReadsAll(t, p2.mnt, r.files, 1)
	if s := readTierStats(t, p2.mnt).Cache.Tiers; s.Tiers[0].State != "shared" || s.StorageBytes > size/100 {
		t.Errorf("a second mount beside the first: %+v", s)
	}
	p2.stop(t)
	p.stop(t)
	checkPrivate(t, dir)

	out, _ := run(t, 0, binary(t, "ffcvfs"), "cache", "ls", dir)
	if !strings.Contains(out, "s3://"+storageBucket+"/"+r.key) {
		t.Errorf("cache ls does not list the object:\n%s", out)
	}

	// A fresh mount of the same object starts warm.
	p = r.mount(t, r.srv.Endpoint(), r.key, args...)
	checkReadsAll(t, p.mnt, r.files, 2)
	if s := readTierStats(t, p.mnt).Cache.Tiers; s.StorageBytes > size/100 || s.Tiers[0].Hits == 0 {
		t.Errorf("a fresh mount read %d bytes from S3 (want at most 1%% of %d): %+v", s.StorageBytes, size, s)
	}
	p.stop(t)

	// A flipped byte in every entry: caught, fetched again, right bytes.
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "p*"))
	for _, e := range entries {
		b, err := os.ReadFile(e)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-100] ^= 1
		if err := os.WriteFile(e, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p = r.mount(t, r.srv.Endpoint(), r.key, args...)
	checkReadsAll(t, p.mnt, r.files, 2)
	if s := readTierStats(t, p.mnt).Cache.Tiers; s.Tiers[0].ChecksumFailures == 0 || s.StorageBytes == 0 {
		t.Errorf("after flipping a byte of every entry: %+v", s)
	}
	p.stop(t)

	// The object replaced by another beton of the same images (other
	// pages): its old entries are never served, and are removed.
	other := filepath.Join(t.TempDir(), "other.beton")
	run(t, 0, binary(t, "ffcvfs"), "write", "--restart-interval", "0", "--page-size", "4MiB", "--classes-out", filepath.Join(t.TempDir(), "c.txt"), testenv.Fixture(t, "imagefolder-small"), other)
	data, err := os.ReadFile(other)
	if err != nil {
		t.Fatal(err)
	}
	r.srv.PutObject(t, storageBucket, r.key, data)
	p = r.mount(t, r.srv.Endpoint(), r.key, args...)
	checkReadsAll(t, p.mnt, r.files, 2)
	if s := readTierStats(t, p.mnt).Cache.Tiers; s.Tiers[0].Dir == disk.Dir || s.StorageBytes < uint64(len(data))/2 {
		t.Errorf("after the object was replaced: %+v", s)
	}
	p.stop(t)
	if subs, _ := filepath.Glob(filepath.Join(dir, "*", "meta.json")); len(subs) != 1 {
		t.Errorf("%d versions cached after the object was replaced, want 1", len(subs))
	}
	run(t, 0, binary(t, "ffcvfs"), "cache", "rm", dir)
	if subs, _ := filepath.Glob(filepath.Join(dir, "*")); len(subs) != 0 {
		t.Errorf("cache rm left %v", subs)
	}
}

// checkPrivate checks that the disk cache's folders are 0700 and its files
// 0600.
func checkPrivate(t *testing.T, dir string) {
	t.Helper()
	filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		want := os.FileMode(0o600)
		if info.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, info.Mode().Perm(), want)
		}
		return nil
	})
}

// A disk cache on a full disk: the mount serves right bytes from S3, the
// tier stops storing with one warning.
func TestDiskCacheFull(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "full.beton", "2MiB")
	dir := tinyDisk(t)
	p := r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "6MiB", "--disk-cache", dir, "--disk-cache-size", "1GiB")
	checkReadsAll(t, p.mnt, r.files, 2)
	checkReadsAll(t, p.mnt, r.files, 2)
	s := readTierStats(t, p.mnt).Cache.Tiers.Tiers[0]
	if !strings.HasPrefix(s.State, "off:") || !strings.Contains(s.State, "no space") {
		t.Errorf("disk tier on a full disk: %+v", s)
	}
	if n := logCount(p, "stopped storing pages"); n != 1 {
		t.Errorf("%d warnings of the full disk, want 1:\n%s", n, p.stderr)
	}
}

// A second mount with --disk-cache on
// a nearly full disk refused to start, its budget "less than one page",
// because the first mount's entries counted against free space. A cache's
// own entries are space it may use.
func TestDiskCacheSecondMountOnFullDisk(t *testing.T) {
	r := newStorageRig(t, testenv.Fixture(t, "imagefolder-small"), "second.beton", "2MiB")
	dir := tinyDisk(t)
	p1 := r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "6MiB", "--disk-cache", dir)
	checkReadsAll(t, p1.mnt, r.files, 2)
	for readTierStats(t, p1.mnt).Cache.Tiers.Tiers[0].Entries == 0 {
		select {
		case <-p1.exited:
			t.Fatalf("the first mount exited:\n%s", p1.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	p2 := r.mount(t, r.srv.Endpoint(), r.key, "--cache-size", "6MiB", "--disk-cache", dir)
	checkReadsAll(t, p2.mnt, r.files, 2)
	if s := readTierStats(t, p2.mnt).Cache.Tiers.Tiers[0]; s.State != "shared" || s.Hits == 0 {
		t.Errorf("the second mount's disk tier: %+v, want shared, with hits", s)
	}
}

// tinyDisk mounts a 3 MiB tmpfs, unmounted at cleanup, and returns it.
func tinyDisk(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Missing(t, "mounting a tmpfs (needs root): %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	return dir
}
