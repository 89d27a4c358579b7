package progress

import (
	"io"
	"os"
	"strings"
	"testing"
)

// drawn returns what a bar of 10 units, all done, wrote to a pipe.
func drawn(t *testing.T) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := New(w, "write", 10, "samples")
	b.Set(10)
	b.Finish()
	w.Close()
	out, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestSilentUnlessTerminal: on a pipe the bar draws nothing, unless
// ForceEnv is 1 (another value is as if unset); forced, it draws the bar
// with its rate.
func TestSilentUnlessTerminal(t *testing.T) {
	for _, v := range []string{"", "0", "yes", "1 "} {
		t.Setenv(ForceEnv, v)
		if out := drawn(t); out != "" {
			t.Errorf("%s=%q: a bar on a pipe: %q", ForceEnv, v, out)
		}
	}
	t.Setenv(ForceEnv, "1")
	if out := drawn(t); !strings.Contains(out, "write [") || !strings.Contains(out, "10/10 samples") || !strings.Contains(out, "samples/s") {
		t.Errorf("%s=1: %q; want the bar", ForceEnv, out)
	}
}

// TestNoRateAtFirst: a bar's first line shows no rate (the first tick of a
// write read "3847712 samples/s"); its final line does.
func TestNoRateAtFirst(t *testing.T) {
	t.Setenv(ForceEnv, "1")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b := New(w, "write", 10, "samples")
	b.Add(10) // drawn at once: all done
	w.Close()
	out, _ := io.ReadAll(r)
	if !strings.Contains(string(out), "10/10 samples (…)") || strings.Contains(string(out), "samples/s") {
		t.Errorf("a bar's first line: %q; want no rate", out)
	}
}
