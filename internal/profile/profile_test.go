package profile

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestStart writes the three profiles the environment names, each a pprof
// file, and none without the variables.
func TestStart(t *testing.T) {
	dir := t.TempDir()
	for _, env := range []string{CPUEnv, MutexEnv, BlockEnv} {
		t.Setenv(env, filepath.Join(dir, env))
	}
	stop, err := Start()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	n := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				mu.Lock()
				n++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if n != 4000 {
		t.Fatal(n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{CPUEnv, MutexEnv, BlockEnv} {
		b, err := os.ReadFile(filepath.Join(dir, env))
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b { // gzipped protobuf
			t.Errorf("%s: %d bytes, %v", env, len(b), err)
		}
	}
	if CPUTime() <= 0 {
		t.Error("no CPU time")
	}
}

// TestStartRefuses: a profile's file that is a symbolic link, a FIFO or a
// folder is refused with a sentence, without waiting for a FIFO's reader.
func TestStartRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "victim"), link); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{fifo: "is a FIFO", link: "is a symbolic link", dir: "is a directory"} {
		t.Setenv(MutexEnv, path)
		stop, err := Start()
		if err == nil {
			stop()
			t.Errorf("%s: started", path)
			continue
		}
		if !strings.Contains(err.Error(), MutexEnv) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v; want %q", path, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "victim")); err == nil {
		t.Error("the link's target was created")
	}
}

// TestStartKeepsOtherFiles: a variable naming a file that is not empty
// and not a profile (the beton being read) is refused and leaves the file
// as it was (a 134 MB beton was truncated to a profile's 537 bytes); a
// profile already there is written over, and one file named by two
// variables is refused.
func TestStartKeepsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	beton := filepath.Join(dir, "train.beton")
	data := []byte("a beton's bytes, which are no profile")
	if err := os.WriteFile(beton, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, env := range []string{CPUEnv, MutexEnv, BlockEnv} {
		t.Setenv(env, beton)
		stop, err := Start()
		if err == nil {
			stop()
			t.Errorf("%s naming a beton: started", env)
		} else if !strings.Contains(err.Error(), "not a profile") {
			t.Errorf("%s naming a beton: %v", env, err)
		}
		t.Setenv(env, "")
		if b, _ := os.ReadFile(beton); string(b) != string(data) {
			t.Fatalf("%s naming a beton changed it to %q", env, b)
		}
	}
	// A profile written over.
	prof := filepath.Join(dir, "cpu.pprof")
	t.Setenv(CPUEnv, prof)
	for range 2 {
		stop, err := Start()
		if err != nil {
			t.Fatal(err)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(MutexEnv, prof)
	if stop, err := Start(); err == nil {
		stop()
		t.Error("one file for two profiles: started")
	} else if !strings.Contains(err.Error(), "names the file") {
		t.Errorf("one file for two profiles: %v", err)
	}
}
