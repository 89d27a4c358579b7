package version

import (
	"os"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestReleaseMatchesPythonPackage: the Go programs and the Python package
// that carries them say the same version.
func TestReleaseMatchesPythonPackage(t *testing.T) {
	b, err := os.ReadFile("../../python/pyproject.toml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^version = "([^"]+)"$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("python/pyproject.toml has no version line")
	}
	if string(m[1]) != Release {
		t.Errorf("python/pyproject.toml says version %s, Release is %s", m[1], Release)
	}
}

func TestString(t *testing.T) {
	s := String("ffcvfs", "cpu: portable")
	want := []string{"ffcvfs " + Release + " (commit ", "built with " + runtime.Version() + " for " + runtime.GOOS + "/" + runtime.GOARCH, "cpu: portable\n"}
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("String = %q, lacks %q", s, w)
		}
	}
}
