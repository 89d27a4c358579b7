package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// mixScript reads every epoch of a Loader mixing the betons of argv with
// weights 0.5/0.3/0.2 and prints each epoch's count of samples by source,
// the fields, and the state after the first 4 batches of epoch 1.
const mixScript = `
import json, sys
from ffcvfs import Loader

a, b, c = sys.argv[1:4]
counts, state = {}, None
with Loader([(a, 0.5), (b, 0.3), (c, 0.2)], epoch_size=300, batch_size=16, resolution=32, epochs=3, seed=5,
            workers=2, names=("image", "label", "source")) as loader:
    fields = [n for n in loader.names]
    for epoch in range(3):
        for images, labels, sources in loader:
            e = loader.current["epoch"]
            per = counts.setdefault(e, [0, 0, 0])
            for s in sources.tolist():
                per[s] += 1
            if e == 1 and loader.current["batch"] == 3:
                state = loader.state_dict()
                args = loader.resume_args()
print(json.dumps({"counts": counts, "fields": fields, "state": state, "args": args}))
`

// TestFeedMixture: a Loader of three betons weighted 0.5/0.3/0.2 gets, each
// epoch, 150, 90 and 60 samples of them (its share each), marked by the
// field "source"; its state carries the mixture, and a server resumed
// under another mixture refuses with a sentence, or starts the next
// epoch whole with --resume-changed new-epoch.
func TestFeedMixture(t *testing.T) {
	py := installedPython(t, "numpy")
	jpg := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	mixed := testenv.Fixture(t, "beton", "imagefolder-mixed.beton")
	third := testenv.CopyFile(t, jpg, filepath.Join(t.TempDir(), "third.beton"))
	ffcvfeed := binary(t, "ffcvfeed")

	cmd := exec.Command(py, "-c", mixScript, jpg, mixed, third)
	cmd.Env = append(os.Environ(), "FFCVFEED="+ffcvfeed)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("a mixture through a Loader: %v\n%s", err, out)
	}
	var got struct {
		Counts map[string][]int
		Fields []string
		State  map[string]any
		Args   []string
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for e := range 3 {
		if c := got.Counts[strconv.Itoa(e)]; fmt.Sprint(c) != "[150 90 60]" {
			t.Errorf("epoch %d: samples by source %v, want [150 90 60]", e, c)
		}
	}
	fp, _ := got.State["mixture"].(string)
	if fp == "" || got.Args[len(got.Args)-2] != "--mixture" || got.Args[len(got.Args)-1] != fp {
		t.Fatalf("state %v, resume args %v: want the mixture's fingerprint in both", got.State, got.Args)
	}

	// The same state resumed over another mixture (another weight).
	rest := []string{"--data", mixed, "--data", third, "--weights", "0.4,0.4,0.2", "--epoch-size", "300", "--batch-size", "16",
		"--resolution", "32", "--epochs", "3", "--seed", "5"}
	args := append(append([]string{"serve", "--data", jpg, "--socket", testenv.Socket(t, "changed.sock")}, rest...), got.Args...)
	_, stderr := run(t, 2, ffcvfeed, args...)
	if !strings.Contains(stderr, "another mixture of sources") || !strings.Contains(stderr, "--resume-changed new-epoch") {
		t.Errorf("a resume under another mixture: %s", stderr)
	}
	// With --resume-changed new-epoch, the stream starts at epoch 2.
	p := startFeed(t, jpg, append(append(rest, "--resume-changed", "new-epoch"), got.Args...)...)
	hello := feedHello(t, py, p.sock)
	if hello["start_epoch"] != 2.0 || hello["start_batch"] != 0.0 {
		t.Errorf("--resume-changed new-epoch: the stream starts at %v, want epoch 2 batch 0", hello)
	}
}

// feedHello prints a server's hello through the Python client.
func feedHello(t *testing.T, py, sock string) map[string]any {
	t.Helper()
	script := `
import json, socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
print(s.makefile("rb").readline().decode())
`
	out, _ := run(t, 0, py, "-c", script, sock)
	var hello map[string]any
	if err := json.Unmarshal([]byte(out), &hello); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	return hello
}

// TestFeedMixtureHostile: weights of 0, negative, NaN or not numbers, too
// few, an epoch size without weights, an empty source, the same beton
// twice, and --peer-listen with several sources are each one line and
// exit 2; weights that do not add up are taken relative to their sum, as
// the log says; a source that fails mid-epoch ends the run with a line
// naming it, nothing left running.
func TestFeedMixtureHostile(t *testing.T) {
	ffcvfeed := binary(t, "ffcvfeed")
	jpg := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	mixed := testenv.Fixture(t, "beton", "imagefolder-mixed.beton")
	empty := filepath.Join(t.TempDir(), "empty.beton")
	w, err := beton.Create(empty, []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}, 0, beton.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	bench := func(args ...string) []string {
		return append([]string{"bench", "--epochs", "1", "--batch-size", "16", "--resolution", "32", "--workers", "1"}, args...)
	}
	// serve has the same 8 words before its own flags as bench, for the
	// messages below.
	serve := func(args ...string) []string {
		return append([]string{"serve", "--socket", testenv.Socket(t, "hostile.sock"), "--data", jpg, "--data", mixed, "--epochs", "1"}, args...)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{bench("--data", jpg, "--data", mixed, "--weights", "0.5,0"), `weight 2, "0", is not above 0`},
		{bench("--data", jpg, "--data", mixed, "--weights", "-1,1"), `weight 1, "-1", is not above 0`},
		{bench("--data", jpg, "--data", mixed, "--weights", "0.5,NaN"), `weight 2, "NaN", is not a number`},
		{bench("--data", jpg, "--data", mixed, "--weights", "half,half"), `weight 1, "half", is not a number`},
		{bench("--data", jpg, "--data", mixed, "--weights", "1"), "1 weights for 2 --data sources"},
		{bench("--data", jpg, "--data", mixed, "--epoch-size", "100"), "--epoch-size sizes an epoch of proportions"},
		{bench("--data", jpg, "--data", empty, "--weights", "1,1"), "source 2 has no samples"},
		{bench("--data", jpg, "--data", jpg), "--data 2 (" + jpg + ") is --data 1 again"},
		{bench("--data", jpg, "--weights", "1"), "--weights mixes several sources"},
		{bench("--data", jpg, "--data", mixed, "--weights", "0.5,n10"), "mix proportions with repeat factors or counts"},
		{bench("--data", jpg, "--data", mixed, "--peer-listen", "127.0.0.1:0", "--peers", "http://127.0.0.1:0"), "--peer-listen serves one beton"},
		{bench("--data", jpg, "--data", mixed, "--weights", "1,1", "--epoch-size", "-5"), "--epoch-size -5: want a positive number"},
		{bench("--data", jpg, "--data", mixed, "--weights", "1,1", "--epoch-size", "99999999999"), "epoch size 99999999999: want 1 to 4294967295"},
		{serve("--resume-changed", "maybe"), `--resume-changed "maybe": want refuse or new-epoch`},
		{serve("--mixture", strings.Repeat("x", 1<<16), "--start-epoch", "0", "--start-batch", "1"), "--mixture: 65536 bytes, not a mixture's fingerprint"},
	} {
		_, stderr := run(t, 2, ffcvfeed, c.args...)
		if !strings.Contains(stderr, c.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("ffcvfeed %s: %q, want one line saying %q", strings.Join(c.args[8:], " "), stderr, c.want)
		}
	}
	// Weights that do not add up: taken relative to their sum.
	_, stderr := run(t, 0, ffcvfeed, bench("--data", jpg, "--data", mixed, "--weights", "3,1", "--epoch-size", "200")...)
	if !regexp.MustCompile(`imagefolder-jpg.beton: 150 \(0.75 of the epoch`).MatchString(stderr) {
		t.Errorf("weights 3,1 of 200 samples: the log does not say 150 and 50:\n%s", stderr)
	}

	// A source over S3 that goes away mid-epoch: one line naming it, the
	// process ends.
	srv := s3test.Start(t)
	srv.CreateBucket(t, "mix")
	data, err := os.ReadFile(mixed)
	if err != nil {
		t.Fatal(err)
	}
	srv.PutObject(t, "mix", "b.beton", data)
	cmd := exec.Command(ffcvfeed, bench("--data", jpg, "--data", "s3://mix/b.beton", "--s3-endpoint", srv.Endpoint(), "--s3-path-style",
		"--epochs", "50", "--cache-size", "4MiB", "--order", "random", "--read-deadline", "2s")...)
	cmd.Env = append(os.Environ(), srv.Env()...)
	output := &testenv.OutputBuffer{}
	cmd.Stdout, cmd.Stderr = output, output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	waitOutput(t, output, "epoch 0: ffcvfeed bench")
	srv.Stop()
	err = waitRead(t, done, "ffcvfeed bench with a source gone")
	if err == nil || !strings.Contains(output.String(), "s3://mix/b.beton") {
		t.Errorf("a source gone mid-run: %v\n%s", err, output)
	}
}

// TestFeedMixtureS3: two betons of 7 pages on S3 (versitygw), mixed, each
// with a cache of 4 pages: over 3 epochs of the quasi-random order, each
// source's pages are read whole, each once an epoch (but those still
// cached from the epoch before), never by ranges: each source's cache is
// told its own order.
func TestFeedMixtureS3(t *testing.T) {
	ffcvfs, ffcvfeed := binary(t, "ffcvfs"), binary(t, "ffcvfeed")
	srv := s3test.Start(t)
	srv.CreateBucket(t, "mix")
	dir := t.TempDir()
	for i, seed := range []string{"3", "4"} {
		tree := filepath.Join(dir, "tree"+seed)
		cmd := exec.Command("go", "run", "./tools/mkimagefolder", "-out", tree, "-classes", "4", "-per-class", "150", "-seed", seed)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mkimagefolder: %v\n%s", err, out)
		}
		out := filepath.Join(dir, fmt.Sprintf("%d.beton", i))
		run(t, 0, ffcvfs, "write", "--page-size", "2MiB", tree, out)
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		srv.PutObject(t, "mix", fmt.Sprintf("%d.beton", i), data)
	}
	cmd := exec.Command(ffcvfeed, "bench", "--data", "s3://mix/0.beton", "--data", "s3://mix/1.beton", "--s3-endpoint", srv.Endpoint(), "--s3-path-style",
		"--epochs", "3", "--batch-size", "16", "--resolution", "32", "--workers", "2", "--cache-size", "16MiB", "--order", "quasi-random")
	cmd.Env = append(os.Environ(), srv.Env()...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("ffcvfeed bench over S3: %v\n%s", err, out)
	}
	re := regexp.MustCompile(`source (\d): (\S+): (\d+) pages and (\d+) ranges read \(\d+ bytes; it has (\d+) pages\)`)
	found := re.FindAllStringSubmatch(string(out), -1)
	if len(found) != 2 {
		t.Fatalf("no line per source:\n%s", out)
	}
	for _, m := range found {
		read, ranges, pages := atoi(t, m[3]), atoi(t, m[4]), atoi(t, m[5])
		const slots, epochs = 4, 3
		if ranges != 0 || read > epochs*pages || read < epochs*pages-slots*(epochs-1) {
			t.Errorf("source %s (%s): %d pages and %d ranges read in %d epochs of its %d pages (cache of %d): want each page whole, once an epoch", m[1], m[2], read, ranges, epochs, pages, slots)
		}
	}
}
