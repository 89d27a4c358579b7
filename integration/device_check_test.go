package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestDeviceCheckCPUOnly: scripts/device-check.sh --prepare --cpu-only
// builds its folder (static programs, xz-compressed, under 40 MiB), and
// the run from it, with no Go on its PATH, prints ffcvfeed's images/s at
// 1 and 2 workers for both betons, the decode baseline's, and the mount's
// raw reads, as lines to grep; where FFCV's source was at hand to
// --prepare, the folder holds a beton FFCV wrote too, and the run reports
// it and its conversion.
func TestDeviceCheckCPUOnly(t *testing.T) {
	needFUSE(t)
	dir := filepath.Join(t.TempDir(), "device-check")
	prep := exec.Command("bash", "scripts/device-check.sh", "--prepare", "--cpu-only")
	prep.Dir = ".."
	prep.Env = append(os.Environ(), "DEVICE_CHECK_DIR="+dir)
	if out, err := prep.CombinedOutput(); err != nil {
		t.Fatalf("--prepare --cpu-only: %v\n%s", err, out)
	}
	var size int64
	ents, _ := os.ReadDir(dir)
	ffcv := false
	for _, e := range ents {
		if info, err := e.Info(); err == nil {
			size += info.Size()
		}
		ffcv = ffcv || e.Name() == "ffcv-photos.beton.xz"
	}
	if files := map[bool]int{false: 3, true: 4}[ffcv]; len(ents) != files || size > 40<<20 {
		t.Errorf("%s holds %d files, %d bytes; want ffcvfs, ffcvfeed and readall (and an FFCV-written beton) in 40 MiB", dir, len(ents), size)
	}
	// The run needs no Go: a PATH without it.
	run := exec.Command("bash", "scripts/device-check.sh", "--cpu-only")
	run.Dir = ".."
	run.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + os.Getenv("HOME"), "DEVICE_CHECK_DIR=" + dir, "DEVICE_CHECK_IMAGES=400"}
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("--cpu-only: %v\n%s", err, out)
	}
	text := string(out)
	want := []string{"ffcvfeed workers=1 images/s=[0-9.]+ beton=plain", "ffcvfeed workers=1 images/s=[0-9.]+ beton=restarts",
		"decode workers=1 images/s=[0-9.]+$", "mount readers=1 files/s=[0-9.]+ MB/s=[0-9.]+"}
	if ffcv {
		want = append(want, "ffcvfeed workers=1 images/s=[0-9.]+ beton=ffcv-written", "ffcvfeed workers=1 images/s=[0-9.]+ beton=ffcv-converted")
	} else {
		want = append(want, "ffcv-written: left out")
	}
	if runtime.NumCPU() >= 2 {
		want = append(want, "ffcvfeed workers=2 images/s=[0-9.]+ beton=restarts", "mount readers=2 files/s=")
	}
	for _, w := range want {
		if !regexp.MustCompile("(?m)^" + w).MatchString(text) {
			t.Errorf("no line %q in:\n%s", w, text)
		}
	}
	if strings.Contains(text, "gpu") {
		t.Errorf("--cpu-only ran GPU parts:\n%s", text)
	}
}
