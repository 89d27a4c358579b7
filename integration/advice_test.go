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

// loaderWordsScript makes Loaders that own their servers with bad keyword
// arguments, then reads one past its epochs, and prints what it was told.
const loaderWordsScript = `
import sys
from ffcvfs import FeedError, Loader

beton = sys.argv[1]
for kw in (dict(batch_size=0), dict(batchsize=3), dict(epochs=0)):
    try:
        Loader(beton, **kw)
        print("no error for", kw)
    except FeedError as e:
        print("error:", e)
with Loader(beton, batch_size=64, epochs=1, resolution=32, workers=1) as loader:
    for _ in loader:
        pass
    print("resume:", sorted(loader.resume_kwargs().items()))
    try:
        for _ in loader:
            pass
    except FeedError as e:
        print("past the end:", e)
`

// TestLoaderSpeaksKeywords: a Loader that owns its server speaks to its
// user in keyword arguments, not the server's flags: batch_size=0 is
// refused as such (it was taken as 256), a misspelt keyword names the one
// meant, epochs=0 is refused (it read nothing), reading past the last
// epoch says epochs=, and resume_kwargs gives what a new Loader takes.
func TestLoaderSpeaksKeywords(t *testing.T) {
	py := debianPython(t, "numpy")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	cmd := exec.Command(py, "-c", loaderWordsScript, beton)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+absPath(t, "../python"), "FFCVFEED="+binary(t, "ffcvfeed"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"error: the Loader's ffcvfeed server for " + beton + " ended (exit 2): ffcvfeed: batch_size=0: want 1 to ",
		`did you mean batch_size=?`,
		"epochs=0: want 1 to ",
		"resume: [('start_batch', 0), ('start_epoch', 1)]",
		"past the end: the Loader of " + beton + " has delivered the 1 epoch(s) it was made for (epochs=1)",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "no error for") || strings.Contains(string(out), "--batch-size") {
		t.Errorf("a bad keyword taken, or the server's flags in the words:\n%s", out)
	}
}
