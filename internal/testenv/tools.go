package testenv

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// FindGoTool returns the path of the executable name that `go install`
// puts in Go's bin folder (versitygw, toxiproxy-server), or "": the path in
// the environment variable envVar when that is set (and nothing else then),
// else name on PATH, else in $(go env GOBIN), each $(go env GOPATH)/bin,
// ~/go/bin or /root/go/bin.
func FindGoTool(name, envVar string) string {
	if p := os.Getenv(envVar); p != "" {
		if isExecutable(p) {
			return p
		}
		return ""
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	var dirs []string
	if gobin := goEnv("GOBIN"); gobin != "" {
		dirs = append(dirs, gobin)
	}
	for _, gp := range filepath.SplitList(goEnv("GOPATH")) {
		dirs = append(dirs, filepath.Join(gp, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	dirs = append(dirs, "/root/go/bin")
	for _, d := range dirs {
		if p := filepath.Join(d, name); isExecutable(p) {
			return p
		}
	}
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// goEnv returns `go env name`, or "" when the go command is not there.
func goEnv(name string) string {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = "/usr/local/go/bin/go"
	}
	out, err := exec.Command(goBin, "env", name).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// OutputBuffer collects output that is written while a test reads it (a
// child process's two pipes, a logger), safe for concurrent use.
type OutputBuffer struct {
	// Limit, when positive, is how much it keeps: writes once it holds
	// that many bytes are dropped.
	Limit int

	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed at the next write; nil if nobody waits
}

func (b *OutputBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written != nil {
		close(b.written)
		b.written = nil
	}
	if b.Limit > 0 && b.buf.Len() > b.Limit {
		return len(p), nil
	}
	return b.buf.Write(p)
}

// Written returns a channel closed at the next write: wait on it, then
// look at String again.
func (b *OutputBuffer) Written() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.written == nil {
		b.written = make(chan struct{})
	}
	return b.written
}

// String returns what was collected.
func (b *OutputBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Announce connects to the announce socket at path, lets write send what
// it likes, closes the writing side and returns the reply: what a client
// of a mount's .ffcvfs/announce sees, however it misbehaves.
func Announce(t testing.TB, path string, write func(io.Writer)) string {
	t.Helper()
	if len(path) > maxSocketPath {
		// A mount's .ffcvfs/announce under a long TMPDIR: its target,
		// the socket itself, is short.
		if target, err := os.Readlink(path); err == nil && filepath.IsAbs(target) {
			path = target
		}
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	write(c)
	c.(*net.UnixConn).CloseWrite()
	b, err := io.ReadAll(c)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("reading the reply: %v", err)
	}
	return string(b)
}
