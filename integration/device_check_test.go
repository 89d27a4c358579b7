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
// 1 and 2 workers for both betons (with the CPU an image took, how busy
// the workers were, the cores' clock), the decode baseline's, the disk's
// rate and the mount's raw reads, as lines to grep; where FFCV's source was at hand to
// --prepare, the folder holds a beton FFCV wrote too, and the run reports
// it and its conversion. Its training section trains a tiny model on the
// CPU fed by batches in memory, ffcvfeed, and torch's DataLoader over the
// mount and over a folder, a train line each; the CUDA feed's line says
// why it is left out.
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
	if files := map[bool]int{false: 4, true: 5}[ffcv]; len(ents) != files || size > 40<<20 {
		t.Errorf("%s holds %d files, %d bytes; want its stamp, ffcvfs, ffcvfeed and readall (and an FFCV-written beton) in 40 MiB", dir, len(ents), size)
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
	want := []string{"ffcvfeed workers=1 images/s=[0-9.]+ beton=plain cpu_ms=[0-9.]+ busy=[0-9]+% mhz=([0-9]+|[?])$", "ffcvfeed workers=1 images/s=[0-9.]+ beton=restarts",
		"decode workers=1 images/s=[0-9.]+$", "mount readers=1 files/s=[0-9.]+ MB/s=[0-9.]+ gomaxprocs=[0-9]+$", "disk (MB/s=[0-9.]+|: no O_DIRECT)",
		"decoded workers=1 epoch1=[0-9.]+ later=[0-9.]+ images/s held=[0-9]+$",
		"train model=tiny feed=cpu-resident images/s=[0-9]+ of_ceiling=1.000$",
		"train model=tiny feed=ffcvfeed-cuda: left out, no GPU$",
		"train model=tiny feed=ffcvfeed-cpu images/s=[0-9]+ of_ceiling=[0-9.]+$",
		"train model=tiny feed=dataloader-mount images/s=[0-9]+ of_ceiling=[0-9.]+$",
		"train model=tiny feed=dataloader-folder images/s=[0-9]+ of_ceiling=[0-9.]+$"}
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
	// The programs say which commit they were built from (they said
	// "commit unknown").
	if !regexp.MustCompile(`(?m)^ffcvfs [0-9.]+ \(commit [0-9a-f]{40}`).MatchString(text) {
		t.Errorf("the run's ffcvfs does not name its commit:\n%s", text)
	}
}

// TestDeviceCheckHostile: --prepare empties only a folder it made: one of
// the user's named by DEVICE_CHECK_DIR is refused and left as it was (it
// deleted testdata/ so, and scripts/ itself); DEVICE_CHECK_LIMIT and
// DEVICE_CHECK_IMAGES past their bounds are refused, 64-bit values too
// (they wrapped into range); and the limit ends a run within a step (it
// was checked between steps only): a run whose Python never returns is
// stopped at DEVICE_CHECK_LIMIT, saying so.
func TestDeviceCheckHostile(t *testing.T) {
	script := func(env ...string) *exec.Cmd {
		cmd := exec.Command("bash", "scripts/device-check.sh")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), env...)
		return cmd
	}
	users := t.TempDir()
	precious := filepath.Join(users, "precious.txt")
	if err := os.WriteFile(precious, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	prep := script("DEVICE_CHECK_DIR=" + users)
	prep.Args = append(prep.Args, "--prepare", "--cpu-only")
	out, err := prep.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "did not make") {
		t.Errorf("--prepare into a folder of the user's: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(precious); err != nil || string(b) != "mine" {
		t.Errorf("--prepare touched the user's file: %q, %v", b, err)
	}
	empty := t.TempDir()
	for _, env := range []string{"DEVICE_CHECK_LIMIT=18446744073709551626", "DEVICE_CHECK_LIMIT=9", "DEVICE_CHECK_LIMIT=86401",
		"DEVICE_CHECK_IMAGES=18446744073709551816", "DEVICE_CHECK_IMAGES=199"} {
		cmd := script("DEVICE_CHECK_DIR="+empty, env)
		cmd.Args = append(cmd.Args, "--cpu-only")
		out, err := cmd.CombinedOutput()
		name, _, _ := strings.Cut(env, "=")
		if err == nil || !strings.Contains(string(out), name) {
			t.Errorf("%s: %v\n%s\nwant it refused", env, err, out)
		}
	}
	// Python that never returns, in the run's first step.
	bin := t.TempDir()
	stuck := filepath.Join(bin, "python3")
	if err := os.WriteFile(stuck, []byte("#!/bin/sh\nexec sleep 100000\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ffcvfs", "ffcvfeed", "readall"} {
		if err := os.WriteFile(filepath.Join(empty, p+".xz"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := script("DEVICE_CHECK_DIR="+empty, "DEVICE_CHECK_LIMIT=10", "PYTHON="+stuck)
	cmd.Args = append(cmd.Args, "--cpu-only")
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the run took its 10 s") {
		t.Errorf("a run stuck in a step: %v\n%s\nwant it stopped at DEVICE_CHECK_LIMIT", err, out)
	}
}
