package integration

import (
	"archive/zip"
	"bytes"
	"debug/elf"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// The wheels of scripts/wheel.sh: FFCVFS_WHEELS names a folder of them
// (scripts/test.sh builds both architectures' before go test); without it,
// the amd64 wheel is built once here.
var (
	wheelOnce sync.Once
	wheelDir  string
	wheelErr  error
)

var wheelName = regexp.MustCompile(`^ffcvfs-([0-9][^-]*)-py3-none-manylinux_2_17_(x86_64|aarch64)\.whl$`)

// wheels returns the wheels to test, by architecture (x86_64, aarch64).
func wheels(t *testing.T) map[string]string {
	t.Helper()
	dir := os.Getenv("FFCVFS_WHEELS")
	if dir == "" {
		wheelOnce.Do(func() {
			wheelDir, wheelErr = sharedTemp("ffcvfs-wheels-")
			if wheelErr != nil {
				return
			}
			cmd := exec.Command("bash", filepath.Join(testenv.RepoRoot(t), "scripts", "wheel.sh"), wheelDir)
			cmd.Env = append(os.Environ(), "ARCHES=amd64")
			if out, err := cmd.CombinedOutput(); err != nil {
				wheelErr = &buildError{"the amd64 wheel (scripts/wheel.sh)", string(out), err}
			}
		})
		if wheelErr != nil {
			t.Fatal(wheelErr)
		}
		dir = wheelDir
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("FFCVFS_WHEELS: %v", err)
	}
	out := map[string]string{}
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".whl") {
			continue
		}
		m := wheelName.FindStringSubmatch(e.Name())
		if m == nil {
			t.Errorf("%s: not a name of the form ffcvfs-VERSION-py3-none-manylinux_2_17_{x86_64,aarch64}.whl", e.Name())
			continue
		}
		out[m[2]] = filepath.Join(dir, e.Name())
	}
	if out["x86_64"] == "" {
		t.Fatalf("no x86_64 wheel in %s", dir)
	}
	if os.Getenv("FFCVFS_WHEELS") != "" && out["aarch64"] == "" {
		t.Fatalf("no aarch64 wheel in FFCVFS_WHEELS=%s", dir)
	}
	return out
}

// TestWheelContents: each wheel holds static ffcvfs and ffcvfeed for its
// architecture (no program interpreter, no shared library needed; `file`
// agrees) and says so in its tag.
func TestWheelContents(t *testing.T) {
	testenv.LookPath(t, "file")
	for arch, whl := range wheels(t) {
		t.Run(arch, func(t *testing.T) {
			dir := unzipWheel(t, whl)
			tag := "Tag: py3-none-manylinux_2_17_" + arch
			var meta []byte
			infos, _ := filepath.Glob(filepath.Join(dir, "ffcvfs-*.dist-info", "WHEEL"))
			if len(infos) == 1 {
				meta, _ = os.ReadFile(infos[0])
			}
			if !slices.Contains(strings.Split(string(meta), "\n"), tag) || !strings.Contains(string(meta), "Root-Is-Purelib: false") {
				t.Errorf("%s: WHEEL says\n%s\nwant %q and Root-Is-Purelib: false", whl, meta, tag)
			}
			want := map[string]elf.Machine{"x86_64": elf.EM_X86_64, "aarch64": elf.EM_AARCH64}[arch]
			for _, name := range []string{"ffcvfs", "ffcvfeed"} {
				p := filepath.Join(dir, "ffcvfs", "bin", name)
				f, err := elf.Open(p)
				if err != nil {
					t.Fatalf("%s in %s: %v", name, whl, err)
				}
				libs, _ := f.ImportedLibraries()
				interp := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
				if f.Machine != want || interp || len(libs) > 0 {
					t.Errorf("%s: machine %v (want %v), program interpreter %v, shared libraries %v", p, f.Machine, want, interp, libs)
				}
				f.Close()
				if out, _ := exec.Command("file", "-b", p).Output(); !strings.Contains(string(out), "statically linked") {
					t.Errorf("file %s: %s", p, out)
				}
				if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
					t.Errorf("%s: not executable (%v)", p, err)
				}
			}
		})
	}
}

// unzipWheel extracts a wheel into a new folder, keeping the programs'
// execute bits, and returns the folder.
func unzipWheel(t *testing.T, whl string) string {
	t.Helper()
	z, err := zip.OpenReader(whl)
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	dir := t.TempDir()
	for _, f := range z.File {
		p := filepath.Join(dir, filepath.FromSlash(f.Name))
		if !strings.HasPrefix(p, dir+string(filepath.Separator)) {
			t.Fatalf("%s: entry %q leaves the folder", whl, f.Name)
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %s: %v", whl, f.Name, err)
		}
		if err := os.WriteFile(p, b, f.Mode().Perm()|0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestWheelInstall: pip installs the x86_64 wheel into a fresh venv; with
// only the venv on PATH (no Go, no compiler) both programs run, and their
// static executables, in an empty chroot (no libjpeg, no C library, no
// /usr), give what the source build gives: `ffcvfeed bench --checksum` the
// same batches, `ffcvfs mount` the same files, and ImageFolder over that
// mount the same pixels.
func TestWheelInstall(t *testing.T) {
	needFUSE(t)
	whl := wheels(t)["x86_64"]
	py := debianPython(t, "torchvision", "venv", "pip")
	venv := filepath.Join(t.TempDir(), "venv")
	// As the README's Install says: system site packages for numpy (the
	// package's one dependency, which pip then finds without an index)
	// and torchvision, the ImageFolder user's.
	var block string
	for _, b := range readREADME(t).blocks {
		if under(b.heads, "Install") && strings.Contains(b.text, "pip install ffcvfs-") {
			block = b.text
		}
	}
	if !strings.Contains(block, "/usr/bin/python3 -m venv --system-site-packages") {
		t.Errorf("README's Install does not make the venv with the system's /usr/bin/python3 and --system-site-packages (another python3 first on the PATH sees neither numpy nor torch):\n%s", block)
	}
	run(t, 0, py, "-m", "venv", "--system-site-packages", venv)
	run(t, 0, filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--no-index", whl)

	onlyVenv := []string{"PATH=" + filepath.Join(venv, "bin"), "HOME=" + t.TempDir()}
	for _, tool := range []string{"go", "gcc", "cc"} {
		if _, err := exec.Command("/bin/sh", "-c", "PATH="+filepath.Join(venv, "bin")+" command -v "+tool).Output(); err == nil {
			t.Fatalf("%s is on the venv's PATH", tool)
		}
	}
	for _, name := range []string{"ffcvfs", "ffcvfeed"} {
		cmd := exec.Command(filepath.Join(venv, "bin", name), "version")
		cmd.Env = onlyVenv
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "on this CPU") {
			t.Fatalf("%s version from the venv: %v\n%s", name, err, out)
		}
	}
	prog := func(name string) string {
		out, _ := run(t, 0, filepath.Join(venv, "bin", "python"), "-c",
			"import ffcvfs, os; print(os.path.join(os.path.dirname(ffcvfs.__file__), 'bin', '"+name+"'))")
		return strings.TrimSpace(out)
	}

	// The empty root: the two programs, the beton, /mnt, /dev/fuse.
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	root := t.TempDir()
	for _, d := range []string{"mnt", "dev", "tmp"} {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range [][2]string{{prog("ffcvfs"), "ffcvfs"}, {prog("ffcvfeed"), "ffcvfeed"}, {beton, "data.beton"}} {
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, f[1]), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fuseDev := filepath.Join(root, "dev", "fuse")
	if err := os.WriteFile(fuseDev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/dev/fuse", fuseDev, "", unix.MS_BIND, ""); err != nil {
		testenv.Missing(t, "bind-mounting /dev/fuse into a chroot: %v (the test needs root)", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(fuseDev, unix.MNT_DETACH) })

	t.Run("bench", func(t *testing.T) {
		args := []string{"bench", "--epochs", "1", "--batch-size", "32", "--order", "random", "--seed", "3", "--exact", "--workers", "2", "--checksum"}
		want := benchChecksum(t, exec.Command(binary(t, "ffcvfeed"), append(args, "--data", beton)...))
		got := benchChecksum(t, exec.Command("chroot", append([]string{root, "/ffcvfeed"}, append(args, "--data", "/data.beton")...)...))
		if got != want {
			t.Errorf("the wheel's ffcvfeed in an empty chroot: checksum %s, the source build's %s", got, want)
		}
	})

	t.Run("mount", func(t *testing.T) {
		source := mountBeton(t, beton)
		mnt := filepath.Join(root, "mnt")
		cmd := exec.Command("chroot", root, "/ffcvfs", "mount", "/data.beton", "/mnt")
		p := launchMount(t, cmd, mnt)
		deadline := time.Now().Add(testenv.Patience)
		for {
			if _, err := os.Stat(control.Path(mnt, control.StatsFile)); err == nil {
				break
			}
			select {
			case <-p.exited:
				t.Fatalf("the wheel's ffcvfs mount in an empty chroot exited (%s):\n%s", cmd.ProcessState, p.stderr)
			case <-time.After(20 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("the wheel's ffcvfs mount: no stats.json in time:\n%s", p.stderr)
			}
		}
		files := mountedFiles(t, source)
		if got := mountedFiles(t, mnt); !slices.Equal(got, files) || len(files) != 200 {
			t.Fatalf("the wheel's mount lists %d files, the source build's %d", len(got), len(files))
		}
		for _, f := range files {
			a, errA := os.ReadFile(filepath.Join(source, f))
			b, errB := os.ReadFile(filepath.Join(mnt, f))
			if errA != nil || errB != nil || !bytes.Equal(a, b) {
				t.Fatalf("%s: the wheel's mount and the source build's differ (%v, %v)", f, errB, errA)
			}
		}
		want := imageFolderPixels(t, filepath.Join(venv, "bin", "python"), source)
		got := imageFolderPixels(t, filepath.Join(venv, "bin", "python"), mnt)
		if !slices.Equal(got, want) || len(got) != len(files) {
			t.Errorf("ImageFolder's pixels over the wheel's mount differ from the source build's (%d, %d samples)", len(got), len(want))
		}
	})
}

// benchChecksum runs an `ffcvfeed bench --checksum` and returns its sum.
func benchChecksum(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`checksum: sha256 ([0-9a-f]{64})`).FindSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	return string(m[1])
}

// imageFolderPixels returns, per sample of torchvision's ImageFolder over
// root, the class and a SHA-256 of its decoded pixels.
func imageFolderPixels(t *testing.T, python, root string) []string {
	t.Helper()
	out, _ := run(t, 0, python, "-c", `
import hashlib, json, sys
import numpy as np
from torchvision.datasets import ImageFolder
d = ImageFolder(sys.argv[1])
json.dump(["%d %s" % (y, hashlib.sha256(np.asarray(x).tobytes()).hexdigest()) for x, y in d], sys.stdout)
`, root)
	var v []string
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWheelArm64: the aarch64 wheel's ffcvfeed, run by qemu-user-static,
// delivers the same batches as the source build here (--exact, a fixed
// seed and order: the same pixels whatever paths the CPU takes).
func TestWheelArm64(t *testing.T) {
	whl := wheels(t)["aarch64"]
	if whl == "" {
		testenv.Missing(t, "no aarch64 wheel: set FFCVFS_WHEELS to the output of scripts/wheel.sh")
	}
	qemu := testenv.LookPath(t, "qemu-aarch64-static")
	prog := filepath.Join(unzipWheel(t, whl), "ffcvfs", "bin", "ffcvfeed")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	args := []string{"bench", "--data", beton, "--epochs", "1", "--batch-size", "32", "--order", "random", "--seed", "5", "--exact", "--workers", "2", "--checksum"}
	want := benchChecksum(t, exec.Command(binary(t, "ffcvfeed"), args...))
	got := benchChecksum(t, exec.Command(qemu, append([]string{prog}, args...)...))
	if got != want {
		t.Errorf("arm64 under qemu: checksum %s, amd64's %s", got, want)
	}
	t.Logf("one epoch of 200 photos: the same batches on arm64 and amd64 (sha256 %.12s…)", got)
}
