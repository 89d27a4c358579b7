package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/storage"
)

// runMainEnv, set in the environment, makes the test binary run main()
// with the arguments after "--": tests run the command as a user would.
const runMainEnv = "FFCVFS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		for i, a := range os.Args {
			if a == "--" {
				os.Args = append([]string{"ffcvfs"}, os.Args[i+1:]...)
				break
			}
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// ffcvfsCmd is ffcvfs ARGS... as a child process of the test binary.
func ffcvfsCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), runMainEnv+"=1")
	return cmd
}

// A backend of the test's own, added as every backend is, in one file
// (storage.Register from its init): fake://PATH reads the file at PATH.
func init() {
	storage.Register(storage.Scheme{Names: []string{"fake"}, Form: "fake://PATH",
		Open: func(ctx context.Context, url string, opts storage.Options) (storage.Source, error) {
			return storage.OpenFile(strings.TrimPrefix(url, "fake://"), opts)
		}})
}

// TestRegisteredScheme: a scheme registered in one file is mounted like
// any other (its files read, stats.json naming it), and mount --help names
// it among the sources, with no other file changed.
func TestRegisteredScheme(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testenv.Missing(t, "/dev/fuse: %v", err)
	}
	testenv.LookPath(t, "fusermount3")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	help, err := ffcvfsCmd("mount", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(help), "fake://PATH") {
		t.Errorf("mount --help does not name the registered scheme (%v):\n%s", err, help)
	}
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := ffcvfsCmd("mount", "fake://"+beton, mnt)
	out := &testenv.OutputBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	defer func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(testenv.Patience):
			cmd.Process.Kill()
			t.Errorf("the mount did not end at SIGTERM:\n%s", out)
		}
	}()
	deadline := time.Now().Add(testenv.Patience)
	for {
		if _, err := os.Stat(control.Path(mnt, control.StatsFile)); err == nil {
			break
		}
		select {
		case <-done:
			t.Fatalf("mount fake://%s ended:\n%s", beton, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount fake://%s: not serving in time:\n%s", beton, out)
		}
	}
	st, err := control.ReadStats(mnt)
	if err != nil || st.Samples != 200 || st.Source != "fake://"+beton && !strings.HasSuffix(st.Source, beton) {
		t.Errorf("stats.json of the mount: %d samples, source %q, %v", st.Samples, st.Source, err)
	}
	classes, err := os.ReadDir(mnt)
	if err != nil || len(classes) != 10 {
		t.Fatalf("the mount's class folders: %d, %v", len(classes), err)
	}
	files, err := os.ReadDir(filepath.Join(mnt, classes[0].Name()))
	if err != nil || len(files) == 0 {
		t.Fatalf("the first class's files: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, classes[0].Name(), files[0].Name())); err != nil || len(b) < 100 || b[0] != 0xFF || b[1] != 0xD8 {
		t.Errorf("a JPEG of the mount: %d bytes, %v", len(b), err)
	}
}
