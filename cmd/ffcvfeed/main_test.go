package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ffcvfs/ffcvfs/cudafeed"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/internal/version"
)

// runMainEnv, set in the environment, makes the test binary run main()
// with the arguments after "--": tests run the command as a user would.
const runMainEnv = "FFCVFEED_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"ffcvfeed"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runFfcvfeed runs ffcvfeed ARGS... in a child process and returns its
// combined output and exit code.
func runFfcvfeed(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running ffcvfeed %v: %v", args, err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}

// TestDeviceFlag: --device takes cpu, cuda and cuda:N; anything else is a
// usage error naming the value.
func TestDeviceFlag(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want cudafeed.Device
		ok   bool
	}{
		{"cpu", cudafeed.Device{}, true},
		{"cuda", cudafeed.Device{CUDA: true}, true},
		{"cuda:0", cudafeed.Device{CUDA: true}, true},
		{"cuda:3", cudafeed.Device{CUDA: true, Ordinal: 3}, true},
		{"cuda:x", cudafeed.Device{}, false},
		{"cuda:", cudafeed.Device{}, false},
		{"cuda:-1", cudafeed.Device{}, false},
		{"gpu", cudafeed.Device{}, false},
		{"", cudafeed.Device{}, false},
	} {
		var got cudafeed.Device
		var err error
		app := &cli.App{
			Flags:          []cli.Flag{deviceFlag()},
			ExitErrHandler: func(*cli.Context, error) {},
			Action: func(c *cli.Context) error {
				got, err = deliveryDevice(c)
				return nil
			},
		}
		if runErr := app.Run([]string{"ffcvfeed", "--device", tc.arg}); runErr != nil {
			t.Fatalf("--device %q: %v", tc.arg, runErr)
		}
		if !tc.ok {
			if err == nil {
				t.Errorf("--device %q: no error, got %v", tc.arg, got)
			} else if !strings.Contains(err.Error(), "--device") {
				t.Errorf("--device %q: error %q does not name the flag", tc.arg, err)
			}
			continue
		}
		if tc.want.CUDA && !cudafeed.CUDASupport {
			if err == nil || !strings.Contains(err.Error(), noCUDAHint) {
				t.Errorf("--device %q in a build without CUDA: error %v, want one saying %q", tc.arg, err, noCUDAHint)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("--device %q: %+v, %v; want %+v", tc.arg, got, err, tc.want)
		}
	}
	var noFlag cudafeed.Device
	app := &cli.App{Flags: []cli.Flag{deviceFlag()}, Action: func(c *cli.Context) (err error) {
		noFlag, err = deliveryDevice(c)
		return err
	}}
	if err := app.Run([]string{"ffcvfeed"}); err != nil || noFlag != (cudafeed.Device{}) {
		t.Errorf("no --device: %+v, %v; want the default, cpu", noFlag, err)
	}
}

// TestServeBadDevice: ffcvfeed serve --device cuda:x fails with status 2
// before opening --data.
func TestServeBadDevice(t *testing.T) {
	out, code := runFfcvfeed(t, "serve", "--data", filepath.Join(t.TempDir(), "missing.beton"),
		"--socket", testenv.Socket(t, "feed.sock"), "--device", "cuda:x")
	if code != 2 || !strings.Contains(out, `--device: device "cuda:x"`) || strings.Contains(out, "missing.beton") {
		t.Errorf("ffcvfeed serve --device cuda:x: exit %d, output:\n%s\nwant exit 2 and an error about --device only", code, out)
	}
}

// --world-size 99999999999 ran ffcvfeed
// out of memory. Every number a flag gives is bounded before it sizes an
// allocation or a loop: a usage error naming the range.
func TestFlagsBounded(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--world-size", "99999999999"}, "world size 99999999999 is out of range; want 1 to 1048576"},
		{[]string{"bench", "--workers", "99999999"}, "workers must be 1 to 1024"},
		{[]string{"bench", "--batch-size", "99999999999"}, "--batch-size 99999999999: want 1 to 16777216 samples a batch"},
		{[]string{"bench", "--resolution", "99999999"}, "each side must be 1 to 65535"},
		{[]string{"bench", "--resolution", "60000", "--batch-size", "100000"}, "would take more than 68719476736 bytes"},
		{[]string{"decode-bench", "--workers", "99999999"}, "--workers 99999999: want 1 to 1024"},
		{[]string{"decode-bench", "--entropy-decoder", "x"}, `--entropy-decoder "x": want ffcvfeed or libjpeg`},
		{[]string{"decode-bench", "--passes", "99999999999"}, "--passes 99999999999: want 1 to 1000"},
		{[]string{"decode-bench", "--passes", "0"}, "--passes 0: want 1 to 1000"},
		{[]string{"bench", "--decoded-cache-size", "-1"}, `--decoded-cache-size "-1": want a size such as 8GiB`},
		{[]string{"bench", "--decoded-cache-size", "lots"}, `--decoded-cache-size "lots": want a size such as 8GiB`},
		{[]string{"bench", "--decoded-cache-size", "1e30"}, `--decoded-cache-size "1e30": want a size such as 8GiB (0: none): "1e30" is too large`},
		{[]string{"bench", "--decoded-cache-size", "65TiB"}, `--decoded-cache-size "65TiB": want a size such as 8GiB (0: none): more than 64 TiB`},
		{[]string{"bench", "--decoded-cache-dir", "/tmp"}, "--decoded-cache-dir needs --decoded-cache-disk-size SIZE"},
		{[]string{"bench", "--decoded-cache-disk-size", "1GiB"}, "--decoded-cache-disk-size needs --decoded-cache-dir DIR"},
		{[]string{"bench", "--decoded-cache-disk-size", "1GiB", "--decoded-cache-dir", "/nonexistent/x"}, "decoded-image cache folder: stat /nonexistent/x: no such file or directory"},
		{[]string{"bench", "--decoded-cache-disk-size", "NaN", "--decoded-cache-dir", "/tmp"}, `--decoded-cache-disk-size "NaN": want a size`},
	} {
		out, code := runFfcvfeed(t, append(tc.args, "--data", beton)...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("ffcvfeed %v: exit %d: %s\nwant exit 2 and %q", tc.args, code, out, tc.want)
		}
	}
}

// TestAugmentFlags: the augmentation, subset and field flags run a bench
// when they make sense, and otherwise fail with exit 2 and a sentence
// naming the flag.
func TestAugmentFlags(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "label-first-two-images.beton")
	dir := t.TempDir()
	ids := filepath.Join(dir, "ids.txt")
	if err := os.WriteFile(ids, []byte("1 2\n3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"bench", "--data", beton, "--workers", "1", "--batch-size", "8", "--epochs", "1"}
	out, code := runFfcvfeed(t, append(base, "--fields", "thumb,label", "--crop", "none", "--translate", "2", "--translate-fill", "125,123,114",
		"--cutout", "4", "--brightness", "0.2", "--contrast", "0.2,1", "--saturation", "0.2", "--mixup", "0.2",
		"--replace-label", "3", "--replace-label-indices", "@"+ids, "--indices", "0,1,2,5,7,9,11,13,15")...)
	if code != 0 || !strings.Contains(out, "9 images") {
		t.Errorf("bench with every augmentation: exit %d\n%s", code, out)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--translate-fill", "1,2"}, "--translate-fill"},
		{[]string{"--brightness", "x"}, "--brightness"},
		{[]string{"--contrast", "0.5,2"}, "--contrast"},
		{[]string{"--indices", "1,-4"}, "--indices"},
		{[]string{"--indices", "@" + filepath.Join(dir, "missing")}, "missing"},
		{[]string{"--indices", "0,999"}, "index 999"},
		{[]string{"--replace-label", "3"}, "--replace-label-indices"},
		{[]string{"--poison-mask", ids}, "--poison-alpha"},
		{[]string{"--fields", "label,nope"}, `no field "nope"`},
		{[]string{"--crop", "none"}, "one size"},
		{[]string{"--cutout", "400"}, "cutout"},
		{[]string{"--entropy-decoder", "pillow"}, `--entropy-decoder "pillow": want ffcvfeed or libjpeg`},
	} {
		out, code := runFfcvfeed(t, append(base, tc.args...)...)
		if code == 0 || !strings.Contains(out, tc.want) || strings.Contains(out, "panic") {
			t.Errorf("%v: exit %d, want an error naming %q:\n%s", tc.args, code, tc.want, out)
		}
	}
}

// TestSocketPathErrors: a --socket that cannot be listened on is refused
// before the data is opened, with exit status 2 and the fix: a missing
// folder, a file where the folder should be, a path too long for a socket.
func TestSocketPathErrors(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "label-first-two-images.beton")
	dir := testenv.SocketDir(t)
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(dir, strings.Repeat("s", 120)+".sock")
	for _, c := range []struct{ socket, want string }{
		{filepath.Join(dir, "run", "feed.sock"), "the folder " + filepath.Join(dir, "run") + " does not exist: create it first (mkdir -p " + filepath.Join(dir, "run") + ")"},
		{filepath.Join(file, "feed.sock"), file + " is not a folder"},
		{long, "a Unix socket's may be at most 107: choose a shorter one"},
	} {
		out, code := runFfcvfeed(t, "serve", "--data", beton, "--socket", c.socket)
		if code != 2 || !strings.Contains(out, "--socket "+c.socket+": ") || !strings.Contains(out, c.want) {
			t.Errorf("serve --socket %s: exit %d, %q; want 2 and %q", c.socket, code, out, c.want)
		}
	}
}

// TestOwnedFolderChecks: a server whose parent is gone removes only the
// folder that is its socket's own, private one: not a link to it, not one
// of another mode, not one holding a folder, not another folder.
func TestOwnedFolderChecks(t *testing.T) {
	mk := func(mode os.FileMode) string {
		d := filepath.Join(t.TempDir(), "ffcvfeed-x")
		if err := os.Mkdir(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "serve.log"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	good := mk(0o700)
	if err := checkOwnedFolder(good, filepath.Join(good, "feed.sock")); err != nil {
		t.Errorf("the socket's private folder: %v", err)
	}
	removeOwnedFolder(func() bool { return false }, filepath.Join(good, "feed.sock"))
	t.Setenv(ownedFolderEnv, good)
	removeOwnedFolder(func() bool { return false }, filepath.Join(good, "feed.sock"))
	if _, err := os.Stat(good); err != nil {
		t.Fatalf("removed while the parent lives: %v", err)
	}
	removeOwnedFolder(func() bool { return true }, filepath.Join(good, "feed.sock"))
	if _, err := os.Stat(good); err == nil {
		t.Errorf("%s left after the parent went", good)
	}

	open := mk(0o755)
	nested := mk(0o700)
	if err := os.Mkdir(filepath.Join(nested, "data"), 0o700); err != nil {
		t.Fatal(err)
	}
	target := mk(0o700)
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ dir, socket, want string }{
		{open, filepath.Join(open, "feed.sock"), "mode -rwxr-xr-x, not 0700"},
		{nested, filepath.Join(nested, "feed.sock"), "it holds a folder, data"},
		{link, filepath.Join(link, "feed.sock"), "not a folder"},
		{target, "/tmp/feed.sock", "it is not the folder of the socket /tmp/feed.sock"},
	} {
		err := checkOwnedFolder(c.dir, c.socket)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("checkOwnedFolder(%s, %s) = %v, want %q", c.dir, c.socket, err, c.want)
		}
		t.Setenv(ownedFolderEnv, c.dir)
		removeOwnedFolder(func() bool { return true }, c.socket)
		if _, err := os.Lstat(c.dir); err != nil {
			t.Errorf("%s removed: %v", c.dir, err)
		}
	}
	if _, err := os.Stat(filepath.Join(target, "serve.log")); err != nil {
		t.Errorf("the folder behind the link lost its files: %v", err)
	}
}

// TestVersion: ffcvfeed version and --version print the release, the
// commit, the toolchain and the C code's paths on this CPU; version takes no arguments.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		out, code := runFfcvfeed(t, args...)
		if code != 0 || !strings.HasPrefix(out, "ffcvfeed "+version.Release+" (commit ") || !strings.Contains(out, "built with go") {
			t.Errorf("ffcvfeed %v: exit %d, %q", args, code, out)
		}
		if !regexp.MustCompile(`\non this CPU: jpeg (x86-64-v3|portable), resize (AVX-512|AVX2|portable), convert (AVX-512 VBMI|x86-64-v3|portable)\n`).MatchString(out) {
			t.Errorf("ffcvfeed %v: no line of the CPU paths: %q", args, out)
		}
	}
	if out, code := runFfcvfeed(t, "version", "extra"); code != 2 || !strings.Contains(out, "version takes no arguments") {
		t.Errorf("ffcvfeed version extra: exit %d, %q; want 2", code, out)
	}
}

// TestHostileRatioFlags: --ratio and --scale of infinities, huge or tiny
// numbers, NaN, and areas above 1 are refused up front with exit 2 and the
// range, not accepted to fail every sample; so are non-finite
// normalization numbers and NaN probabilities.
func TestHostileRatioFlags(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "label-first-two-images.beton")
	base := []string{"bench", "--data", beton, "--workers", "1", "--batch-size", "8", "--epochs", "1", "--resolution", "32"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--ratio", "inf,inf"}, `--ratio "inf,inf": want two numbers LOW,HIGH with 0.001 <= LOW <= HIGH <= 1000`},
		{[]string{"--ratio", "1e300,1e300"}, `--ratio "1e300,1e300": want two numbers`},
		{[]string{"--ratio", "1e-300,1e-300"}, `--ratio "1e-300,1e-300": want two numbers`},
		{[]string{"--ratio", "nan,1"}, `--ratio "nan,1": want two numbers`},
		{[]string{"--scale", "0.5,2"}, `--scale "0.5,2": want two numbers LOW,HIGH with 1e-06 <= LOW <= HIGH <= 1`},
		{[]string{"--scale", "-inf,1"}, `--scale "-inf,1"`},
		{[]string{"--flip", "NaN"}, "flip probability NaN"},
		{[]string{"--center-ratio", "NaN", "--crop", "center"}, "center ratio NaN"},
		{[]string{"--dtype", "float32", "--normalize", "inf,0,0/1,1,1"}, `--normalize "inf,0,0/1,1,1"`},
		{[]string{"--dtype", "float32", "--normalize", "0,0,0/1,1,nan"}, `--normalize "0,0,0/1,1,nan"`},
	} {
		out, code := runFfcvfeed(t, append(base, c.args...)...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, %q; want 2 and %q", c.args, code, out, c.want)
		}
	}
}

// writeNpy writes a .npy file of the type and shape given, holding data.
func writeNpy(t *testing.T, path, descr, shape string, data []byte) {
	t.Helper()
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
	hdr += strings.Repeat(" ", 63-(10+len(hdr))%64) + "\n"
	b := append([]byte("\x93NUMPY\x01\x00"), byte(len(hdr)), byte(len(hdr)>>8))
	if err := os.WriteFile(path, append(append(b, hdr...), data...), 0o600); err != nil {
		t.Fatal(err)
	}
}

// runFfcvfeedRSS runs ffcvfeed ARGS... like runFfcvfeed, failing the test
// if it does not end within testenv.Patience (a FIFO it would wait on), and
// returns its peak resident size in bytes too.
func runFfcvfeedRSS(t *testing.T, args ...string) (string, int, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testenv.Patience)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("ffcvfeed %v did not end: it waits on its input", args)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}

// TestHostileIDFiles: the files behind @FILE (id lists, .npy arrays, peer
// lists) are read as regular files only, their size checked first and
// their contents parsed as they are read: a FIFO and /dev/zero are refused
// at once, a sparse .npy claiming 256 Mi elements before its data is read,
// and 100 MiB of "0\n" costs the ids it names, not gigabytes.
func TestHostileIDFiles(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "label-first-two-images.beton")
	dir := t.TempDir()
	fifo := filepath.Join(dir, "ids.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "ids.npy")
	writeNpy(t, sparse, "|u1", "(268435456,)", nil)
	if err := os.Truncate(sparse, 128+256<<20); err != nil { // the data, sparse
		t.Fatal(err)
	}
	big := filepath.Join(dir, "ids.txt")
	if err := os.WriteFile(big, bytes.Repeat([]byte("0\n"), 50<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	mask, alpha := filepath.Join(dir, "mask.npy"), filepath.Join(dir, "alpha.npy")
	writeNpy(t, mask, "|u1", "(32, 32, 3)", make([]byte, 32*32*3))
	writeNpy(t, alpha, "<f8", "(32, 32)", make([]byte, 32*32*8))
	hugeText := filepath.Join(dir, "huge.txt")
	if err := os.WriteFile(hugeText, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Truncate(hugeText, 1<<40) // sparse

	base := []string{"bench", "--data", beton, "--workers", "1", "--batch-size", "8", "--epochs", "1", "--resolution", "32"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--indices", "@" + fifo}, "not a regular file (a FIFO)"},
		{[]string{"--indices", "@/dev/zero"}, "not a regular file (a character device)"},
		{[]string{"--poison-indices", "@" + fifo, "--poison-mask", mask, "--poison-alpha", alpha}, "not a regular file (a FIFO)"},
		{[]string{"--poison-indices", "1", "--poison-mask", sparse, "--poison-alpha", alpha}, "an array of shape [268435456] (268435456 elements); at most 3072 here"},
		{[]string{"--indices", "@" + sparse}, "an array of shape [268435456] (268435456 elements); at most 67108864 here"},
		{[]string{"--indices", "@" + hugeText}, "more than a list of 67108864 ids takes"},
		{[]string{"--indices", "1,x2"}, `"x2" is not a sample id`},
		{[]string{"--indices", strings.Repeat("9", 30)}, "is not a sample id"},
		{[]string{"--peer-listen", "127.0.0.1:0", "--peers", "@" + fifo}, "--peers: " + fifo + ": not a regular file (a FIFO)"},
		{[]string{"--peer-listen", "127.0.0.1:0", "--peers", "http://127.0.0.1:1", "--peer-secret-file", "/dev/zero"}, "not a regular file (a character device)"},
	} {
		out, code, _ := runFfcvfeedRSS(t, append(base, c.args...)...)
		if code != 2 && code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, %q; want an error saying %q", c.args, code, out, c.want)
		}
	}
	// 52 Mi ids, all 0: a label replaced for sample 0, at 4 bytes an id.
	out, code, rss := runFfcvfeedRSS(t, append(base, "--replace-label", "1", "--replace-label-indices", "@"+big)...)
	if code != 0 {
		t.Fatalf("--replace-label-indices of 50 Mi ids: exit %d\n%s", code, out)
	}
	bound := int64(512 << 20) // 200 MiB of ids, and the pipeline
	if raceEnabled {
		bound *= 3
	}
	if rss > bound {
		t.Errorf("--replace-label-indices of 50 Mi ids: peak RSS %d MiB, want under %d MiB", rss>>20, bound>>20)
	}
	t.Logf("50 Mi ids from a 100 MiB file: peak RSS %d MiB", rss>>20)
}

// TestBenchChecksum: bench --checksum sums the batches in order, so that
// one or two workers give the same sum (with --exact and without), and
// another seed another one.
func TestBenchChecksum(t *testing.T) {
	data := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	re := regexp.MustCompile(`checksum: sha256 ([0-9a-f]{64}) \((\d+) batches\)`)
	sum := func(args ...string) string {
		out, code := runFfcvfeed(t, append([]string{"bench", "--data", data, "--epochs", "2", "--batch-size", "32", "--order", "random", "--checksum"}, args...)...)
		m := re.FindStringSubmatch(out)
		if code != 0 || m == nil || m[2] != "14" {
			t.Fatalf("bench %v: exit %d, %s", args, code, out)
		}
		return m[1]
	}
	for _, exact := range [][]string{{"--exact"}, nil} {
		a := sum(append([]string{"--workers", "1", "--seed", "7"}, exact...)...)
		b := sum(append([]string{"--workers", "2", "--seed", "7"}, exact...)...)
		c := sum(append([]string{"--workers", "2", "--seed", "8"}, exact...)...)
		if a != b || a == c {
			t.Errorf("%v: seed 7 with 1 and 2 workers %.12s, %.12s; seed 8 %.12s", exact, a, b, c)
		}
	}
}

// TestDecodeBenchPasses: --passes decodes every JPEG that many times.
func TestDecodeBenchPasses(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	one, code := runFfcvfeed(t, "decode-bench", "--data", beton, "--workers", "1")
	three, code3 := runFfcvfeed(t, "decode-bench", "--data", beton, "--workers", "2", "--passes", "3")
	var n1, n3 int
	if _, err := fmt.Sscanf(one, "decode-only: %d images", &n1); err != nil || code != 0 {
		t.Fatalf("decode-bench: exit %d: %s", code, one)
	}
	if _, err := fmt.Sscanf(three, "decode-only: %d images", &n3); err != nil || code3 != 0 || n3 != 3*n1 || n1 == 0 {
		t.Fatalf("decode-bench --passes 3: %d images, once %d: exit %d: %s", n3, n1, code3, three)
	}
}

// TestMistakesOneLine: a mistake on the command line is one line, prefixed
// with the program's name, naming the mistake and the nearest command or
// flag, with exit status 2; an error of a run is one line prefixed too.
// These printed the whole help, "Required flag "socket" not set" after it,
// or an error without the program's name.
func TestMistakesOneLine(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--data", beton}, 2, "ffcvfeed: serve needs --socket (see ffcvfeed serve --help)"},
		{[]string{"bench"}, 2, "ffcvfeed: bench needs --data (see ffcvfeed bench --help)"},
		{[]string{"serv", "--data", beton}, 2, `ffcvfeed: no command "serv"; did you mean "serve"? (see ffcvfeed --help)`},
		{[]string{"bench", "--data", beton, "--epoch", "2"}, 2, `ffcvfeed: bench has no flag "--epoch"; did you mean --epochs? (see ffcvfeed bench --help)`},
		{[]string{"bench", "--data", filepath.Join(t.TempDir(), "nosuch.beton")}, 1, "ffcvfeed: "},
	} {
		out, code := runFfcvfeed(t, tc.args...)
		if code != tc.code || !strings.HasPrefix(out, tc.want) || strings.Count(strings.TrimSpace(out), "\n") > 0 {
			t.Errorf("ffcvfeed %v: exit %d:\n%s\nwant exit %d and one line starting %q", tc.args, code, out, tc.code, tc.want)
		}
	}
}
