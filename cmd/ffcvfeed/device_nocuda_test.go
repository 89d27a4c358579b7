//go:build !cuda

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// TestServeCUDAWithoutSupport: in a build without the cuda tag, ffcvfeed
// serve --device cuda:0 says how to get CUDA support and exits non-zero,
// before opening --data (which does not exist here).
func TestServeCUDAWithoutSupport(t *testing.T) {
	out, code := runFfcvfeed(t, "serve", "--data", filepath.Join(t.TempDir(), "missing.beton"),
		"--socket", testenv.Socket(t, "feed.sock"), "--device", "cuda:0")
	if code == 0 || !strings.Contains(out, "--device cuda:0: "+noCUDAHint) || strings.Contains(out, "missing.beton") {
		t.Errorf("ffcvfeed serve --device cuda:0: exit %d, output:\n%s\nwant a non-zero exit and %q", code, out, noCUDAHint)
	}
	t.Logf("exit %d: %s", code, strings.TrimSpace(out))
}
