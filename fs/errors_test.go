package fs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/storage"
)

// TestReadErrorsLoggedOncePerCause: failed reads whose errors differ only
// in the sample, page or detail of one cause are logged once, and counted
// each; interrupted reads are neither logged nor counted.
func TestReadErrorsLoggedOncePerCause(t *testing.T) {
	var buf bytes.Buffer
	v := &View{errs: errorLog{log: slog.New(slog.NewTextHandler(&buf, nil)), seen: map[string]int{}}}
	changed := func(page int) error {
		return fmt.Errorf("s3://b/k: reading page %d: %w: opened with ETag \"e1\", S3 now has \"e2\"", page, storage.ErrChanged)
	}
	corrupt := func(sample int) error {
		return fmt.Errorf("sample %d: %w: image pointer %d is in no allocation", sample, beton.ErrCorrupt, 1000+sample)
	}
	for i, err := range []error{changed(1), changed(2), corrupt(3), changed(3), corrupt(4)} {
		if errno := v.readError(fmt.Sprintf("read of sample %d", i), err); errno != syscall.EIO {
			t.Errorf("%v: %v, want EIO", err, errno)
		}
	}
	if errno := v.readError("read of sample 9", fmt.Errorf("waiting for page 2: %w", context.Canceled)); errno != syscall.EINTR {
		t.Errorf("an interrupted read: %v, want EINTR", errno)
	}
	if n := v.reads.errors.Load(); n != 5 {
		t.Errorf("reads.errors = %d, want the 5 failed reads", n)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "read of sample 0 failed") || !strings.Contains(lines[1], "read of sample 2 failed") {
		t.Errorf("want one line for the change and one for the corruption, got:\n%s", buf.String())
	}
}
