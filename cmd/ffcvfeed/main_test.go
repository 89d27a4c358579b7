package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/cudafeed"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/urfave/cli/v2"
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
		"--socket", filepath.Join(t.TempDir(), "feed.sock"), "--device", "cuda:x")
	if code != 2 || !strings.Contains(out, `--device: device "cuda:x"`) || strings.Contains(out, "missing.beton") {
		t.Errorf("ffcvfeed serve --device cuda:x: exit %d, output:\n%s\nwant exit 2 and an error about --device only", code, out)
	}
}

// Finding 3 of the hardening review: --world-size 99999999999 ran ffcvfeed
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
		{[]string{"bench", "--batch-size", "99999999999"}, "batch size 99999999999 is out of range"},
		{[]string{"bench", "--resolution", "99999999"}, "each side must be 1 to 65535"},
		{[]string{"bench", "--resolution", "60000", "--batch-size", "100000"}, "would take more than 68719476736 bytes"},
		{[]string{"decode-bench", "--workers", "99999999"}, "--workers 99999999: want 1 to 1024"},
		{[]string{"decode-bench", "--entropy-decoder", "x"}, `--entropy-decoder "x": want ffcvfeed or libjpeg`},
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
