package storage

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// captureLogger returns a debug-level logger writing to a buffer, and the
// buffer.
func captureLogger() (*slog.Logger, *testenv.OutputBuffer) {
	b := &testenv.OutputBuffer{}
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug})), b
}

func TestSourceOptionsDefaults(t *testing.T) {
	var o Options
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if o.Logger == nil || o.PartSize != 4<<20 || o.Parallel != 4 || o.AttemptTimeout != 30*time.Second ||
		o.ReadDeadline != 2*time.Minute || o.MaxRetries != 8 || o.BackoffBase != 100*time.Millisecond ||
		o.BackoffMax != 5*time.Second || o.UploadDeadline != 2*time.Minute {
		t.Errorf("defaults: %+v", o)
	}
}

func TestSourceOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{DirectIO: true, KernelCache: true}, "exclude each other"},
		{Options{PartSize: -1}, "part size"},
		{Options{Parallel: -2}, "parallel"},
		{Options{AttemptTimeout: -time.Second}, "attempt timeout"},
		{Options{ReadDeadline: -time.Second}, "read deadline"},
		{Options{BackoffBase: time.Second, BackoffMax: time.Millisecond}, "backoff max"},
		{Options{Endpoint: "127.0.0.1:9000"}, "not an http:// or https:// URL"},
		{Options{Endpoint: "http://key:hunter2@127.0.0.1:9000"}, "must not hold credentials"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error about %q", tc.o, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("error shows a password: %v", err)
		}
	}
	o := Options{MaxRetries: -5}
	if err := o.Validate(); err != nil || o.MaxRetries != -1 {
		t.Errorf("MaxRetries -5: %v, %d", err, o.MaxRetries)
	}
}

func TestOpenSourceSchemes(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "x.beton")
	if err := os.WriteFile(path, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, u := range []string{path, "file://" + path, "FILE://" + path, "file://localhost" + path} {
		src, err := Open(ctx, u, Options{Logger: discardLogger()})
		if err != nil {
			t.Errorf("Open(%s): %v", u, err)
			continue
		}
		if _, ok := src.(*FileSource); !ok || src.Size() != 5 || src.Name() != path {
			t.Errorf("Open(%s) = %T %q size %d", u, src, src.Name(), src.Size())
		}
		b := make([]byte, 5)
		if _, err := src.ReadAt(context.Background(), b, 0); err != nil || string(b) != "hello" {
			t.Errorf("Open(%s): read %q, %v", u, b, err)
		}
		src.Close()
	}
	for _, tc := range []struct{ url, want string }{
		{"gs://bucket/key", `unsupported URL scheme "gs"`},
		{"ftp://user:hunter2@host/x", `ftp://host/x: unsupported URL scheme "ftp"`},
		{"s3://bucket", "s3://bucket/key"},
		{"s3:///key", "s3://bucket/key"},
		{"file://otherhost/x", "not host"},
		{"", "empty"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "it is a folder; an ImageFolder tree becomes a beton with: ffcvfs write"},
		{"http://user:hunter2@[::1", "open http://…"},
	} {
		_, err := Open(ctx, tc.url, Options{Logger: discardLogger()})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%q) = %v, want an error saying %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): error shows a password: %v", tc.url, err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pw@example.com/a/b.beton":         "https://example.com/a/b.beton",
		"https://example.com/b.beton?X-Amz-Signature=s": "https://example.com/b.beton?…",
		"http://example.com:8080/b#frag":                "http://example.com:8080/b",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

// checkReadAt compares src.ReadAt(context.Background(), len n at off) with data, by the rules of
// io.ReaderAt: short only at the end, with io.EOF.
func checkReadAt(t *testing.T, src Source, data []byte, p []byte, off int64) {
	t.Helper()
	n, err := src.ReadAt(context.Background(), p, off)
	want := 0
	if off < int64(len(data)) {
		want = min(len(p), len(data)-int(off))
	}
	switch {
	case n != want:
		t.Fatalf("ReadAt(%d bytes at %d) = %d, %v; want %d", len(p), off, n, err, want)
	case want < len(p) && err != io.EOF:
		t.Fatalf("ReadAt(%d bytes at %d) across the end: err %v, want io.EOF", len(p), off, err)
	case want == len(p) && err != nil:
		t.Fatalf("ReadAt(%d bytes at %d): %v", len(p), off, err)
	case n > 0 && !bytes.Equal(p[:n], data[off:off+int64(n)]):
		t.Fatalf("ReadAt(%d bytes at %d): bytes differ", len(p), off)
	}
}

// TestURLCredentialsNeverShown: credentials written into a URL are
// refused with a sentence that does not show them, for reading and for
// writing: s3://ID:SECRET@bucket/key was taken for a bucket named
// "ID:SECRET@bucket" and echoed whole.
func TestURLCredentialsNeverShown(t *testing.T) {
	ctx := context.Background()
	for _, url := range []string{"s3://AKID:hunter2@bucket/key", "s3://hunter2@bucket/key", "file://me:hunter2@localhost/x"} {
		_, err := Open(ctx, url, Options{Logger: discardLogger()})
		if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "holds no") {
			t.Errorf("Open(%q): %v", url, err)
		}
	}
	for _, url := range []string{"s3://AKID:hunter2@bucket/key", "s3://AKID:hunter2@bucket"} {
		_, err := Create(ctx, url, Options{Logger: discardLogger()})
		if err == nil || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Create(%q): %v", url, err)
		}
	}
}
