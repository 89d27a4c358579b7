package integration

import (
	"bytes"
	enc "encoding/binary"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/beton"
)

// claimed is an io.ReadSeeker of a file of size bytes: head, then zeros.
type claimed struct {
	head      []byte
	size, off int64
}

func (c *claimed) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), c.size-c.off)]
	clear(p)
	if c.off < int64(len(c.head)) {
		copy(p, c.head[c.off:])
	}
	c.off += int64(len(p))
	return len(p), nil
}

func (c *claimed) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		c.off = off
	case io.SeekCurrent:
		c.off += off
	case io.SeekEnd:
		c.off = c.size + off
	}
	return c.off, nil
}

// TestHTTPSourceClaimsTooMuch: an HTTP source whose header claims 300
// million samples, in a file of zeros as long as their metadata, or four
// billion with tables that would fit the file, is refused with a sentence
// naming it, by info and mount, within little memory. They read gigabytes
// of metadata into memory first, and ran out of it with no sentence.
func TestHTTPSourceClaimsTooMuch(t *testing.T) {
	// A real beton's head (header, descriptors), its counts patched.
	dir := t.TempDir()
	small := filepath.Join(dir, "one.beton")
	fields := []beton.Field{{Type: beton.TypeRGBImage, Name: "image"}, {Type: beton.TypeInt, Name: "label"}}
	w, err := beton.Create(small, fields, 1, beton.WriterOptions{PageSize: beton.MinPageSize})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.WriteSample([]beton.Value{{Mode: beton.ModeRaw, Width: 1, Height: 1, Data: []byte{1, 2, 3}}, {Int: 0}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := beton.OpenFile(small)
	if err != nil {
		t.Fatal(err)
	}
	record := int64(f.RecordLayout().RecordSize)
	f.Close()
	b, err := os.ReadFile(small)
	if err != nil {
		t.Fatal(err)
	}
	metaStart := int64(beton.HeaderSize + len(fields)*beton.DescriptorSize)
	head := b[:metaStart]
	files := map[string]*claimed{}
	for name, samples := range map[string]uint64{"zeros": 300_000_000, "tables": 1<<32 - 2} {
		h := bytes.Clone(head)
		enc.LittleEndian.PutUint64(h[8:], samples)
		size := metaStart + int64(samples)*record
		if name == "tables" {
			enc.LittleEndian.PutUint64(h[16:], uint64(size)) // an empty table at the end
		}
		files["/"+name+".beton"] = &claimed{head: h, size: size}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c, ok := files[r.URL.Path]
		if !ok {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("ETag", `"claims"`)
		http.ServeContent(rw, r, r.URL.Path, time.Unix(1e9, 0), &claimed{head: c.head, size: c.size})
	}))
	defer srv.Close()
	for _, name := range []string{"zeros", "tables"} {
		url := srv.URL + "/" + name + ".beton"
		for _, args := range [][]string{{"info", url}, {"mount", url, t.TempDir()}} {
			out, peak, err := runPeak(t, binary(t, "ffcvfs"), args...)
			if err == nil || !strings.Contains(string(out), name+".beton") || peak > 256<<20 {
				t.Errorf("%s: %v, peak RSS %d MiB\n%s\nwant a sentence naming it, in less than 256 MiB", strings.Join(args, " "), err, peak>>20, out)
			}
			t.Logf("%s: %s", args[0], strings.TrimSpace(string(out)))
		}
	}
}

// peakLauncher is the Python that runs a program as its child and writes
// the child's peak resident size, in KiB, to the file $PEAK_FILE. A
// process this test process starts counts this process's own size in its
// ru_maxrss (it shares this process's memory until its exec), which grows
// as the tests run; the launcher's child starts from the launcher's few
// MiB instead.
const peakLauncher = `import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
with open(os.environ["PEAK_FILE"], "w") as f:
    f.write(str(ru.ru_maxrss))
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)`

// runPeak runs name with args and returns its output, its peak resident
// size in bytes and its error.
func runPeak(t *testing.T, name string, args ...string) ([]byte, int64, error) {
	t.Helper()
	peak := filepath.Join(t.TempDir(), "peak")
	cmd := exec.Command(debianPython(t), append([]string{"-c", peakLauncher, name}, args...)...)
	cmd.Env = append(os.Environ(), "PEAK_FILE="+peak)
	out, err := cmd.CombinedOutput()
	b, rerr := os.ReadFile(peak)
	if rerr != nil {
		t.Fatalf("%s: no peak measured: %v\n%s", name, rerr, out)
	}
	kb, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if perr != nil {
		t.Fatalf("%s: peak %q: %v", name, b, perr)
	}
	return out, kb << 10, err
}
