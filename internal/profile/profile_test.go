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
