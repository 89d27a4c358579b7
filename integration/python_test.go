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
// has the package in ../python installed as a user would install it (pip
// install, from a copy of the folder, so that the build leaves nothing in
// the tree), made once per test run. It fails (CI) or skips the test when
// that python cannot import modules. Scripts run with it import ffcvfs,
// ffcvfs_sampler and ffcvfeed from the installed package, not from the
// source tree.
func installedPython(t *testing.T, modules ...string) string {
	t.Helper()
	debianPython(t, modules...)
	pyEnv.once.Do(func() {
		dir, err := os.MkdirTemp("", "ffcvfs-venv-")
		if err != nil {
			pyEnv.err = err.Error()
			return
		}
		src := filepath.Join(dir, "src")
		steps := [][]string{
			{"cp", "-r", "../python", src},
			{"/usr/bin/python3", "-m", "venv", "--system-site-packages", filepath.Join(dir, "venv")},
			// No network: the build uses Debian's setuptools and wheel,
			// and the dependencies are Debian's.
			{filepath.Join(dir, "venv", "bin", "python"), "-m", "pip", "install", "--quiet", "--no-build-isolation", "--no-deps", "--no-index", src},
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
			if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
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
