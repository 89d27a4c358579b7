package integration

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// adviceScript reads an epoch through a Loader that starts its own server
// and prints the FeedWarnings it raised.
const adviceScript = `
import sys, warnings
from ffcvfs import FeedWarning, Loader

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with Loader(sys.argv[1], batch_size=16, resolution=32, workers=1, epochs=1) as loader:
        for images, labels in loader:
            pass
for w in caught:
    print(w.category.__name__ + ":", w.message, flush=True)
`

// TestRestartAdvice: the advice to add restart markers reaches whoever
// runs ffcvfeed. A Python user whose Loader owns its server gets it as a
// FeedWarning (the server's log is private); through a mount, it names the
// beton the mount serves, the one to convert, not the mount's
// .ffcvfs/dataset.beton.
func TestRestartAdvice(t *testing.T) {
	py := debianPython(t, "numpy")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton") // FFCV's writer: no restart markers
	ffcvfeed := binary(t, "ffcvfeed")
	advice := "'ffcvfs write --from-beton " + beton + " OUT.beton' adds them"

	cmd := exec.Command(py, "-c", adviceScript, beton)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+absPath(t, "../python"), "FFCVFEED="+ffcvfeed)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("an epoch through a Loader: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "FeedWarning: ffcvfeed serve --data "+beton+": ") || !strings.Contains(string(out), advice) {
		t.Errorf("the Loader's Python user got no FeedWarning with the advice %q:\n%s", advice, out)
	}

	mnt := mountBeton(t, beton)
	_, stderr := run(t, 0, ffcvfeed, "bench", "--data", mnt, "--epochs", "1", "--workers", "1", "--resolution", "32")
	if !strings.Contains(stderr, advice) || strings.Contains(stderr, "--from-beton "+mnt) {
		t.Errorf("ffcvfeed bench over a mount: the advice should name %s:\n%s", beton, stderr)
	}
}
