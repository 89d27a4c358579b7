package integration

import (
	"bytes"
	bin "encoding/binary"
	"encoding/json"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
)

// Hostile input against the writer: streams whose images compress far
// better than their pixels, counts and sizes no one delivers, outputs and
// sources that are not what they seem. Each ends with the beton or a
// sentence, in bounded memory, leaving nothing.

// streamFrame appends a stream frame of kind to b.
func streamFrame(b []byte, kind byte, body []byte) []byte {
	b = bin.LittleEndian.AppendUint32(b, uint32(len(body)+1))
	b = append(b, kind)
	return append(b, body...)
}

// streamHeader is a stream's header frame.
func streamHeader(t *testing.T, h map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	return streamFrame(nil, 'H', b)
}

// imageSample is the body of a sample frame of an image file and a label.
func imageSample(id int, file []byte) []byte {
	b := bin.LittleEndian.AppendUint64(nil, uint64(id))
	b = append(b, 0) // a file
	b = bin.LittleEndian.AppendUint32(b, 0)
	b = bin.LittleEndian.AppendUint32(b, 0)
	b = bin.LittleEndian.AppendUint32(b, uint32(len(file)))
	b = append(b, file...)
	return bin.LittleEndian.AppendUint64(b, uint64(id%10))
}

// smoothPNG is a side×side PNG of smooth colours: tens of KB on the
// stream, side²×3 bytes once decoded.
func smoothPNG(t *testing.T, side int) []byte {
	img := image.NewNRGBA(image.Rect(0, 0, side, side))
	for y := range side {
		for x := range side {
			o := img.PixOffset(x, y)
			img.Pix[o], img.Pix[o+1], img.Pix[o+2], img.Pix[o+3] = byte(x/64), byte(y/64), 100, 255
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestWriteStreamMemoryCompressedImages: 32 PNGs of 2500×2500 pixels,
// 25 KB each on the stream and 18.75 MB each stored raw, written by 2
// workers: the writer's peak resident size stays within its stated
// bound (Options.MaxHeld, 128 MiB for 2 workers; per worker an image
// decoded; a page of 32 MiB; the Go heap's room to grow), under 512 MiB.
// Batches were bounded by frame bytes: the 32 samples were one batch,
// 600 MB of pixels held at once (200 such PNGs of 4000×4000 took 6 GB).
func TestWriteStreamMemoryCompressedImages(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	const side, n = 2500, 32
	pngBytes := smoothPNG(t, side)
	stream := streamHeader(t, map[string]any{"format": "ffcvfs-stream", "version": 1, "samples": n, "page_size": 32 << 20,
		"fields": []map[string]any{{"name": "image", "type": "rgb_image", "write_mode": "raw"}, {"name": "label", "type": "int"}}})
	for id := range n {
		stream = streamFrame(stream, 'S', imageSample(id, pngBytes))
	}
	dir := t.TempDir()
	src, out := filepath.Join(dir, "pngs.stream"), filepath.Join(dir, "out.beton")
	if err := os.WriteFile(src, stream, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ffcvfs, "write", "--from-stream", src, "--workers", "2", out)
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
	if st, err := os.Stat(out); err != nil || st.Size() < n*side*side*3 {
		t.Fatalf("the beton: %v, %v", st, err)
	}
	if !strings.Contains(string(b), "raw 32") {
		t.Errorf("summary: %s", b)
	}
	t.Logf("%d KB stream, %d MB of pixels: peak RSS %d MiB", len(stream)>>10, n*side*side*3>>20, rss>>20)
	if rss > 512<<20 {
		t.Errorf("peak RSS %d MiB; want at most 512 MiB", rss>>20)
	}
}

// labelStream is a stream of n samples of one int field, its header's
// fields and page size as given.
func labelStream(t *testing.T, n int, more map[string]any) []byte {
	h := map[string]any{"format": "ffcvfs-stream", "version": 1, "samples": n, "fields": []map[string]any{{"name": "label", "type": "int"}}}
	for k, v := range more {
		h[k] = v
	}
	b := streamHeader(t, h)
	for id := range n {
		b = streamFrame(b, 'S', bin.LittleEndian.AppendUint64(bin.LittleEndian.AppendUint64(nil, uint64(id)), uint64(id)))
	}
	return b
}

// TestWriteStreamSummaryPageSize: the summary gives the page size the
// beton has, the header's (it gave --page-size's, 8 MiB, for a header's
// 64 MiB).
func TestWriteStreamSummaryPageSize(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	src, out := filepath.Join(dir, "s"), filepath.Join(dir, "out.beton")
	if err := os.WriteFile(src, labelStream(t, 3, map[string]any{"page_size": 64 << 20}), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, _ := run(t, 0, ffcvfs, "write", "--from-stream", src, out)
	if !strings.Contains(stdout, "3 samples, 0 pages of 64 MiB") {
		t.Errorf("summary: %s", stdout)
	}
	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.PageSize() != 64<<20 {
		t.Errorf("the beton's pages are of %d bytes", f.PageSize())
	}
}
