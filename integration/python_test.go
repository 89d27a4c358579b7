package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// pyEnv is the virtual environment that installedPython makes once per
// test run.
var pyEnv struct {
	once sync.Once
	py   string // its python
	err  string // why it could not be made
}

// installedPython returns the python of a virtual environment that sees
// Debian's packages (torch, torchvision, NumPy: --system-site-packages) and
// has the package in ../python installed as a user would install it (a
// wheel built by pip from a copy of the folder, so that the build leaves
// nothing in the tree, with the programs of this repository in it), made
// once per test run. It fails (CI) or skips the test when
// that python cannot import modules. Scripts run with it import ffcvfs,
// ffcvfs_sampler and ffcvfeed from the installed package, not from the
// source tree.
func installedPython(t *testing.T, modules ...string) string {
	t.Helper()
	debianPython(t, modules...)
	pyEnv.once.Do(func() {
		dir, err := sharedTemp("ffcvfs-venv-")
		if err != nil {
			pyEnv.err = err.Error()
			return
		}
		src, wheels := filepath.Join(dir, "src"), filepath.Join(dir, "wheels")
		steps := [][]string{
			{"cp", "-r", "../python", src},
			{"/usr/bin/python3", "-m", "venv", "--system-site-packages", filepath.Join(dir, "venv")},
			// No network: the build uses Debian's setuptools and wheel,
			// and the dependencies are Debian's. The wheel holds the Go
			// programs, built from this repository (setup.py), and the
			// venv gets the wheel alone.
			{filepath.Join(dir, "venv", "bin", "python"), "-m", "pip", "wheel", "--quiet", "--no-build-isolation", "--no-deps", "--no-index", "-w", wheels, src},
			{"sh", "-c", `"$1" -m pip install --quiet --no-deps --no-index "$2"/ffcvfs-*.whl`, "sh", filepath.Join(dir, "venv", "bin", "python"), wheels},
		}
		for i, s := range steps {
			if i == 1 {
				// A build left in ../python by an earlier pip install
				// (as README's Install does) would be installed in
				// place of the copied sources: cp gives its files
				// fresh times.
				for _, stale := range []string{"build", "ffcvfs.egg-info"} {
					if err := os.RemoveAll(filepath.Join(src, stale)); err != nil {
						pyEnv.err = err.Error()
						return
					}
				}
			}
			cmd := exec.Command(s[0], s[1:]...)
			repo, err := filepath.Abs("..")
			if err != nil {
				pyEnv.err = err.Error()
				return
			}
			cmd.Env = append(os.Environ(), "FFCVFS_GO_SOURCE="+repo)
			if out, err := cmd.CombinedOutput(); err != nil {
				pyEnv.err = s[0] + " " + s[len(s)-1] + ": " + err.Error() + "\n" + string(out) +
					"(apt-get install python3-venv python3-pip python3-setuptools python3-wheel)"
				return
			}
		}
		pyEnv.py = filepath.Join(dir, "venv", "bin", "python")
	})
	if pyEnv.err != "" {
		testenv.Missing(t, "installing ../python into a virtual environment: %s", pyEnv.err)
	}
	return pyEnv.py
}
