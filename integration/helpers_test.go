package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds the named command of the repository once per test run and
// returns its path.
func binary(t *testing.T, name string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "ffcvfs-bin-")
		if buildErr != nil {
			return
		}
		for _, cmd := range []string{"ffcvfs"} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, cmd), "../cmd/"+cmd).CombinedOutput()
			if err != nil {
				buildErr = &buildError{cmd, string(out), err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, name)
}

type buildError struct {
	cmd, out string
	err      error
}

func (e *buildError) Error() string { return "building " + e.cmd + ": " + e.err.Error() + "\n" + e.out }

// run runs a command and returns its stdout; it fails the test when the exit
// status is not want.
func run(t *testing.T, want int, name string, args ...string) (stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	if code != want {
		t.Fatalf("%s %v: exit %d, want %d\nstdout: %s\nstderr: %s", name, args, code, want, o.String(), e.String())
	}
	return o.String(), e.String()
}

// debianPython returns /usr/bin/python3 if it imports the given modules.
func debianPython(t *testing.T, modules ...string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	for _, m := range modules {
		if err := exec.Command(py, "-c", "import "+m).Run(); err != nil {
			testenv.Missing(t, "%s cannot import %s (apt-get install python3-torchvision python3-numpy python3-pil)", py, m)
		}
	}
	return py
}

// torchvisionImageFolder returns what torchvision's ImageFolder sees in root:
// classes, and (path, label) per sample.
func torchvisionImageFolder(t *testing.T, root string) (classes []string, samples [][2]any) {
	t.Helper()
	py := debianPython(t, "torchvision")
	out, _ := run(t, 0, py, "-c", `
import json, sys
from torchvision.datasets import ImageFolder
d = ImageFolder(sys.argv[1])
json.dump({"classes": d.classes, "samples": d.samples}, sys.stdout)
`, root)
	var v struct {
		Classes []string
		Samples [][2]any
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatal(err)
	}
	return v.Classes, v.Samples
}
