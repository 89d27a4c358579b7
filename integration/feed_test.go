package integration

import (
	"bytes"
	"context"
	endian "encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/cudafeed"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// feedConsumer reads every epoch with the ffcvfs package's Loader and prints one JSON
// line per batch, then one summary line.
const feedConsumer = `
import json, mmap, sys
import numpy as np
from ffcvfs import Loader

def reaches_mmap(a):
    while a is not None:
        if isinstance(a, mmap.mmap):
            return True
        a = getattr(a, "base", None)
    return False

with Loader(sys.argv[1]) as loader:
    print(json.dumps({"len": len(loader), "epochs": loader.epochs}), flush=True)
    for _ in range(loader.epochs):
        for images, labels in loader:
            m = loader.current
            vals = np.unique(images)
            print(json.dumps({
                "epoch": m["epoch"], "batch": m["batch"], "size": m["size"],
                "images_shape": list(images.shape), "labels_shape": list(labels.shape),
                "labels": labels.tolist(),
                "values": vals.tolist(),
                "checksum": int(images.sum(dtype=np.int64)),
                "zero_copy": bool(np.shares_memory(images, loader.buffer) and np.shares_memory(labels, loader.buffer)
                                  and reaches_mmap(images) and reaches_mmap(labels)
                                  and not images.flags.owndata and not labels.flags.owndata),
            }), flush=True)
    print(json.dumps({"ended": loader.ended}), flush=True)
`

type feedBatch struct {
	Epoch, Batch, Size int
	ImagesShape        []int `json:"images_shape"`
	LabelsShape        []int `json:"labels_shape"`
	Labels             []int64
	Values             []int
	Checksum           int64
	ZeroCopy           bool `json:"zero_copy"`
	Len, Epochs        *int
	Ended              *bool
}

func TestFeedPythonLoader(t *testing.T) {
	py := installedPython(t, "numpy")
	const (
		samples = 50
		bsz     = 8
		epochs  = 2
		h, w    = 8, 8
	)
	perEpoch := (samples + bsz - 1) / bsz // 7; the last batch holds 2
	ring, err := cudafeed.CreateRing(fmt.Sprintf("ffcvfeed-it-%d", os.Getpid()), cudafeed.RingSpec{Slots: 3, Fields: []cudafeed.FieldSpec{
		{Name: "images", DType: "uint8", Shape: []int{bsz, h, w, 3}},
		{Name: "labels", DType: "int64", Shape: []int{bsz}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer ring.Close()
	sock := testenv.Socket(t, "feed.sock")
	srv, err := cudafeed.NewServer(ring, cudafeed.Options{SocketPath: sock, BatchesPerEpoch: perEpoch, Epochs: epochs,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()

	// order(e, i) is the i-th sample of epoch e: a different permutation per epoch.
	order := func(e, i int) int64 { return int64((i*7 + e*3) % samples) }
	value := func(e, b int) byte { return byte(e*perEpoch + b + 1) }

	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	prodErr := make(chan error, 1)
	go func() {
		for e := 0; e < epochs; e++ {
			for b := 0; b < perEpoch; b++ {
				slot, err := srv.AcquireSlot(ctx)
				if err != nil {
					prodErr <- err
					return
				}
				f := ring.Slot(slot)
				size := min(bsz, samples-b*bsz)
				for i := range f[0] {
					f[0][i] = 0xEE // rows past size must not be seen
				}
				copy(f[0], bytes.Repeat([]byte{value(e, b)}, size*h*w*3))
				for i := 0; i < bsz; i++ {
					endian.LittleEndian.PutUint64(f[1][8*i:], uint64(1<<40))
				}
				for i := 0; i < size; i++ {
					endian.LittleEndian.PutUint64(f[1][8*i:], uint64(order(e, b*bsz+i)))
				}
				if err := srv.Publish(slot, e, b, size); err != nil {
					prodErr <- err
					return
				}
			}
		}
		prodErr <- nil
	}()

	cmd := exec.CommandContext(ctx, py, "-c", feedConsumer, sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python consumer: %v\nstderr:\n%s\nstdout:\n%s", err, stderr.String(), out)
	}
	if err := <-prodErr; err != nil {
		t.Fatalf("producer: %v", err)
	}

	var lines []feedBatch
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var b feedBatch
		if err := dec.Decode(&b); err != nil {
			t.Fatalf("consumer output: %v\n%s", err, out)
		}
		lines = append(lines, b)
	}
	if len(lines) != 2+epochs*perEpoch {
		t.Fatalf("%d output lines, want %d:\n%s", len(lines), 2+epochs*perEpoch, out)
	}
	if first := lines[0]; first.Len == nil || *first.Len != perEpoch || *first.Epochs != epochs {
		t.Errorf("len/epochs line: %s", out[:bytes.IndexByte(out, '\n')])
	}
	if last := lines[len(lines)-1]; last.Ended == nil || !*last.Ended {
		t.Errorf("the consumer did not see the end")
	}
	for e := 0; e < epochs; e++ {
		seen := map[int64]int{}
		for b := 0; b < perEpoch; b++ {
			got := lines[1+e*perEpoch+b]
			size := min(bsz, samples-b*bsz)
			if got.Epoch != e || got.Batch != b || got.Size != size {
				t.Errorf("line %d: epoch %d batch %d size %d, want %d %d %d", 1+e*perEpoch+b, got.Epoch, got.Batch, got.Size, e, b, size)
				continue
			}
			if !got.ZeroCopy {
				t.Errorf("epoch %d batch %d: arrays do not view the shared memory", e, b)
			}
			if fmt.Sprint(got.ImagesShape) != fmt.Sprint([]int{size, h, w, 3}) || fmt.Sprint(got.LabelsShape) != fmt.Sprint([]int{size}) {
				t.Errorf("epoch %d batch %d: shapes %v %v", e, b, got.ImagesShape, got.LabelsShape)
			}
			v := value(e, b)
			if len(got.Values) != 1 || got.Values[0] != int(v) || got.Checksum != int64(v)*int64(size*h*w*3) {
				t.Errorf("epoch %d batch %d: image values %v checksum %d, want all %d", e, b, got.Values, got.Checksum, v)
			}
			for i, l := range got.Labels {
				if want := order(e, b*bsz+i); l != want {
					t.Errorf("epoch %d batch %d row %d: label %d, want %d", e, b, i, l, want)
				}
				seen[l]++
			}
		}
		for s := int64(0); s < samples; s++ {
			if seen[s] != 1 {
				t.Errorf("epoch %d: sample %d seen %d times", e, s, seen[s])
			}
		}
	}
}

// TestFeedPythonClientUnit runs python/test_ffcvfeed_client.py (a fake server:
// missing socket, malformed hellos, releases, torch zero-copy) and
// python/test_ffcvfeed_cuda_client.py (the client's cuda mode: handles,
// event waits and the release rule, against a stand-in for CuPy).
func TestFeedPythonClientUnit(t *testing.T) {
	// torch too: without it the torch tests would skip themselves.
	py := installedPython(t, "numpy", "torch")
	// The tests run from a folder of their own, so that they import the
	// installed client, not the one beside them.
	dir := t.TempDir()
	for _, f := range []string{"test_ffcvfeed_client.py", "test_ffcvfeed_cuda_client.py"} {
		b, err := os.ReadFile(filepath.Join("..", "python", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "-v", "test_ffcvfeed_client", "test_ffcvfeed_cuda_client")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python tests: %v\n%s", err, out)
	}
	if testenv.InCI() && strings.Contains(string(out), "skipped") {
		t.Fatalf("python tests skipped some (CI=true, so this fails):\n%s", out)
	}
}
