package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// busyReader reads the files of mnt over and over until stop is called,
// dropping each file's pages from the kernel's cache after reading it, so
// that every read reaches the mount.
func busyReader(t *testing.T, mnt string) (stop func()) {
	t.Helper()
	files := mountedFiles(t, mnt)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 1<<20)
		for {
			for _, f := range files {
				select {
				case <-done:
					return
				default:
				}
				fh, err := os.Open(filepath.Join(mnt, f))
				if err != nil {
					t.Error(err)
					return
				}
				for {
					n, err := fh.Read(buf)
					if n == 0 || err != nil {
						break
					}
				}
				_ = unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED)
				fh.Close()
				time.Sleep(2 * time.Millisecond) // a steady load, not a spin
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(done); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// TestStatsView runs ffcvfs stats in a real terminal (tmux, 80 columns)
// against a busy mount, and reads the screen: the title, the header, and
// lines that show the reads, none wider than the terminal. --once --json
// gives the same figures to scripts.
func TestStatsView(t *testing.T) {
	tmux := testenv.LookPath(t, "tmux")
	ffcvfs := binary(t, "ffcvfs")
	mnt := mountBeton(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	stop := busyReader(t, mnt)

	// The server's socket in the test's own folder, not in tmux's default
	// one outside TMPDIR.
	sock := testenv.Socket(t, "tmux")
	tm := func(args ...string) (string, error) {
		out, err := exec.Command(tmux, append([]string{"-S", sock}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := tm("new-session", "-d", "-s", "stats", "-x", "80", "-y", "24", ffcvfs+" stats "+mnt); err != nil {
		t.Fatalf("tmux new-session: %v\n%s", err, out)
	}
	t.Cleanup(func() { _, _ = tm("kill-server") })

	var screen string
	var busy []string
	deadline := time.Now().Add(testenv.Patience)
	for len(busy) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("in time, the screen shows %d lines with images read:\n%s", len(busy), screen)
		}
		time.Sleep(500 * time.Millisecond)
		out, err := tm("capture-pane", "-p", "-J", "-t", "stats")
		if err != nil {
			t.Fatalf("tmux capture-pane: %v\n%s", err, out)
		}
		screen, busy = out, nil
		for _, l := range strings.Split(screen, "\n") {
			f := strings.Fields(l)
			// time images/s read stor hit% RAM [disk%] inflight err
			if len(f) >= 7 && strings.Count(f[0], ":") == 2 {
				if n, err := strconv.ParseFloat(f[1], 64); err == nil && n > 0 {
					busy = append(busy, l)
				}
			}
		}
	}
	t.Logf("screen:\n%s", screen)
	lines := strings.Split(strings.TrimRight(screen, "\n"), "\n")
	if !strings.Contains(lines[0], filepath.Base(filepath.Dir(mnt))+"/mnt: 200 samples in 10 classes") {
		t.Errorf("title %q, want the mountpoint and what it serves", lines[0])
	}
	if len(lines) < 2 || !strings.Contains(lines[1], "images/s") || !strings.Contains(lines[1], "hit%") || !strings.Contains(lines[1], "RAM/budget") {
		t.Errorf("header %q", lines[1])
	}
	for _, l := range lines {
		if len([]rune(l)) > 80 {
			t.Errorf("a line of %d columns in an 80-column terminal: %q", len([]rune(l)), l)
		}
	}
	for _, l := range busy {
		f := strings.Fields(l)
		if f[len(f)-1] != "0" {
			t.Errorf("errors column %q, want 0: %q", f[len(f)-1], l)
		}
		if mb, err := strconv.ParseFloat(f[2], 64); err != nil || mb <= 0 {
			t.Errorf("read MB/s %q while reading: %q", f[2], l)
		}
		if !strings.Contains(l, "/4MiB") {
			t.Errorf("RAM column of %q: want used/4MiB (the budget)", l)
		}
	}

	// --once --json, for scripts.
	out, _ := run(t, 0, ffcvfs, "stats", "--once", "--json", "--interval", "500ms", mnt)
	var j struct {
		ImagesPerS     float64  `json:"images_per_s"`
		HitRatio       *float64 `json:"hit_ratio"`
		RAMBudgetBytes int64    `json:"ram_budget_bytes"`
		Errors         *uint64  `json:"errors"`
	}
	if err := json.Unmarshal([]byte(out), &j); err != nil {
		t.Fatalf("stats --once --json: %v: %q", err, out)
	}
	if j.ImagesPerS <= 0 || j.HitRatio == nil || j.RAMBudgetBytes != 4<<20 || j.Errors == nil || *j.Errors != 0 {
		t.Errorf("stats --once --json on a busy mount: %s", out)
	}
	stop()

	// The mount goes away: the view says so and exits 1.
	_, stderr := run(t, 1, ffcvfs, "stats", "--once", t.TempDir())
	if !strings.Contains(stderr, "is not an ffcvfs mount") {
		t.Errorf("stats on a plain folder: %q", stderr)
	}
}
