package integration

import (
	"bytes"
	"context"
	bin "encoding/binary"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/s3test"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/internal/toxitest"
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
	pngBytes := testenv.SmoothPNG(t, side)
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

// waitOutput waits until b holds s, failing the test after
// testenv.Patience (a hang).
func waitOutput(t *testing.T, b *testenv.OutputBuffer, s string) {
	t.Helper()
	stop := time.After(testenv.Patience)
	for {
		ch := b.Written()
		if strings.Contains(b.String(), s) {
			return
		}
		select {
		case <-ch:
		case <-stop:
			t.Fatalf("waited for %q; the output holds:\n%s", s, b)
		}
	}
}

// uploadIDs lists the bucket's incomplete uploads.
func uploadIDs(t *testing.T, srv *s3test.Server, bucket string) []string {
	t.Helper()
	out, err := srv.Client().ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, u := range out.Uploads {
		ids = append(ids, aws.ToString(u.UploadId))
	}
	return ids
}

// TestWriteS3Stalled: an S3 endpoint that stops answering mid-upload (the
// timeout toxic both ways, after the upload began) hung the write for
// ever, and SIGTERM then took a minute and left the upload without a word.
// Now each request ends by --upload-deadline: the write ends with a
// sentence naming the part and the stall and, the endpoint back by the
// abort, leaves no upload; interrupted while the endpoint stays silent, it
// ends within the abort's deadline and names the upload it leaves and how
// to remove it.
func TestWriteS3Stalled(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	srv := s3test.Start(t)
	srv.CreateBucket(t, "betons")
	tp := toxitest.Start(t)
	proxy := tp.Proxy(t, "s3", strings.TrimPrefix(srv.Endpoint(), "http://"))
	stall := func() {
		for _, dir := range []string{"up", "down"} {
			proxy.AddToxic(t, toxitest.Toxic{Name: "stall-" + dir, Type: "timeout", Stream: dir + "stream", Attributes: map[string]int64{"timeout": 0}})
		}
	}
	unstall := func() {
		proxy.RemoveToxic(t, "stall-up")
		proxy.RemoveToxic(t, "stall-down")
	}
	// 24 samples of 1 MiB, the stream's second half sent once the endpoint
	// is stalled: parts 2 and 3 are sent then.
	const n = 24
	var first, second []byte
	first = streamHeader(t, map[string]any{"format": "ffcvfs-stream", "version": 1, "samples": n, "fields": []map[string]any{{"name": "blob", "type": "bytes"}}})
	for id := range n {
		body := bin.LittleEndian.AppendUint64(nil, uint64(id))
		body = bin.LittleEndian.AppendUint32(body, 1<<20)
		body = append(body, bytes.Repeat([]byte{byte(id)}, 1<<20)...)
		if id < 4 {
			first = streamFrame(first, 'S', body)
		} else {
			second = streamFrame(second, 'S', body)
		}
	}
	start := func(key string) (*exec.Cmd, *os.File, *testenv.OutputBuffer) {
		pr, pw, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(ffcvfs, "-v", "write", "--from-stream", "-", "--s3-endpoint", "http://"+proxy.Addr(),
			"--attempt-timeout", "500ms", "--upload-deadline", "3s", "s3://betons/"+key)
		cmd.Env = append(os.Environ(), srv.Env()...)
		cmd.Stdin = pr
		var out testenv.OutputBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pr.Close()
		if _, err := pw.Write(first); err != nil {
			t.Fatal(err)
		}
		waitOutput(t, &out, "the upload began")
		if ids := uploadIDs(t, srv, "betons"); len(ids) != 1 {
			t.Fatalf("S3 lists %d uploads once the writer said it began one", len(ids))
		}
		return cmd, pw, &out
	}

	t.Run("ends, then aborts", func(t *testing.T) {
		cmd, pw, out := start("stalled.beton")
		stall()
		go func() { pw.Write(second); pw.Close() }()
		waitOutput(t, out, "aborting the upload")
		unstall()
		err := cmd.Wait()
		t.Logf("%s", out)
		if cmd.ProcessState.ExitCode() != 1 {
			t.Errorf("exit %v", err)
		}
		for _, want := range []string{"ffcvfs: writing s3://betons/stalled.beton: part ", "request stalled: nothing received for 500ms", "s3://betons/stalled.beton was not written"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		if ids := uploadIDs(t, srv, "betons"); len(ids) != 0 {
			t.Errorf("uploads left: %v", ids)
		}
	})
	t.Run("SIGTERM while silent", func(t *testing.T) {
		cmd, pw, out := start("silent.beton")
		defer pw.Close()
		stall()
		go pw.Write(second)
		waitOutput(t, out, "storage request failed; retrying")
		cmd.Process.Signal(syscall.SIGTERM)
		err := cmd.Wait()
		t.Logf("%s", out)
		unstall()
		ids := uploadIDs(t, srv, "betons")
		if cmd.ProcessState.ExitCode() != 130 || len(ids) != 1 {
			t.Fatalf("exit %v, uploads left %v; want 130 and one", err, ids)
		}
		for _, want := range []string{"interrupted; s3://betons/silent.beton was not written; aborting the upload of s3://betons/silent.beton (upload id " + ids[0] + ") failed",
			"aws s3api abort-multipart-upload --bucket betons --key silent.beton --upload-id " + ids[0]} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("the output lacks %q", want)
			}
		}
		if _, err := srv.Client().AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{
			Bucket: aws.String("betons"), Key: aws.String("silent.beton"), UploadId: aws.String(ids[0])}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWriteStreamTwice: one stream given twice (standard input as - and
// fd:0, a file by two names) is refused with a sentence (exit 2); it was
// taken, and then failed with "standard input: no header".
func TestWriteStreamTwice(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	dir := t.TempDir()
	src := filepath.Join(dir, "s")
	if err := os.WriteFile(src, labelStream(t, 2, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(src, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "out.beton")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-", "-"}, "standard input and standard input are the same stream"},
		{[]string{"-", "fd:0"}, "standard input and fd:0 are the same stream"},
		{[]string{src, filepath.Join(dir, "link")}, "are the same stream: each producer needs one of its own"},
	} {
		var args []string
		for _, a := range c.args {
			args = append(args, "--from-stream", a)
		}
		cmd := exec.Command(ffcvfs, append(append([]string{"write"}, args...), out)...)
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdin = in
		b, _ := cmd.CombinedOutput()
		in.Close()
		if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(b), c.want) {
			t.Errorf("%v: exit %d, %s; want exit 2 and %q", c.args, cmd.ProcessState.ExitCode(), b, c.want)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("the folder holds %d files", len(ents))
	}
}

// TestDatasetWriterDashNames: DatasetWriter("-h"), ("--help") and
// ("-train.beton") write files of those names. The first two printed
// ffcvfs write's help and returned success with no file; the third failed
// with "flag provided but not defined".
func TestDatasetWriterDashNames(t *testing.T) {
	py := installedPython(t, "numpy")
	dir := t.TempDir()
	script := `
from ffcvfs.fields import IntField
from ffcvfs.writer import DatasetWriter
for name in ["-h", "--help", "-train.beton"]:
    DatasetWriter(name, {"label": IntField()}, num_workers=1).from_indexed_dataset([(1,), (2,), (3,)])
`
	cmd := exec.Command(py, "-c", script)
	cmd.Dir = dir
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, b)
	}
	for _, name := range []string{"-h", "--help", "-train.beton"} {
		f, err := beton.OpenFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if f.NumSamples() != 3 || f.Int(2, 0) != 3 {
			t.Errorf("%s: %d samples", name, f.NumSamples())
		}
		f.Close()
	}
}

// TestWriteUploadFlags: --attempt-timeout and --upload-deadline refuse a
// negative, zero or absurd duration with a sentence (exit 2), and one that
// is no duration with urfave/cli's parse error in one line (exit 2),
// before anything is read or written.
func TestWriteUploadFlags(t *testing.T) {
	ffcvfs := binary(t, "ffcvfs")
	for _, flag := range []string{"--attempt-timeout", "--upload-deadline"} {
		for _, c := range []struct {
			value, want string
			code        int
		}{
			{"-5s", flag + " -5s: want more than 0 and at most 168h0m0s", 2},
			{"0s", flag + " 0s: want more than 0", 2},
			{"10000h", flag + " 10000h0m0s: want more than 0 and at most 168h0m0s", 2},
			{"2562047h", "at most 168h0m0s", 2},
			{"soon", "write: invalid value \"soon\" for flag -" + flag[2:] + ": parse error (see ffcvfs write --help)", 2}, // urfave/cli's parse error
		} {
			cmd := exec.Command(ffcvfs, "write", flag, c.value, "--from-stream", "-", "s3://bucket/out.beton")
			cmd.Stdin = strings.NewReader("")
			b, _ := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != c.code || !strings.Contains(string(b), c.want) {
				t.Errorf("%s %s: exit %d, %s; want exit %d with %q", flag, c.value, code, b, c.code, c.want)
			}
		}
	}
}

// TestDatasetWriterCtrlC: Ctrl-C (SIGINT to the terminal's process group)
// during a DatasetWriter write ends it with one line of ffcvfs write's,
// "interrupted; … was not written", and Python's own KeyboardInterrupt
// from the call, nothing left. It printed a traceback from every worker
// besides (and an "Exception ignored" from one being forked).
func TestDatasetWriterCtrlC(t *testing.T) {
	py := installedPython(t, "numpy")
	dir := t.TempDir()
	script := `
import sys, time
import numpy as np
from ffcvfs.fields import IntField, RGBImageField
from ffcvfs.writer import DatasetWriter

class Slow:
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        if i == 20:
            print("at 20", flush=True)
        time.sleep(0.01)
        return np.full((64, 64, 3), i % 256, np.uint8), i

DatasetWriter("slow.beton", {"image": RGBImageField(), "label": IntField()}, num_workers=4).from_indexed_dataset(Slow(), chunksize=10)
`
	cmd := exec.Command(py, "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // a process group, as a terminal's
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(stdout, buf); err != nil || string(buf) != "at 20\n" {
		cmd.Process.Kill()
		t.Fatalf("the writer did not reach sample 20: %q, %v", buf, err)
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	out := stderr.String()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGINT {
		t.Errorf("the writing process ended with %v; want Python's end by SIGINT (KeyboardInterrupt)", err)
	}
	if strings.Count(out, "interrupted; slow.beton was not written") != 1 || strings.Count(out, "Traceback") != 1 ||
		!strings.HasSuffix(strings.TrimSpace(out), "KeyboardInterrupt") || strings.Contains(out, "Process ") ||
		strings.Contains(out, "Exception ignored") {
		t.Errorf("stderr after Ctrl-C:\n%s\nwant ffcvfs write's line once and one KeyboardInterrupt", out)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left behind: %v", ents)
	}
}

// TestDatasetWriterCtrlCAtStart: a Ctrl-C that reaches ffcvfs write before
// it catches signals (the first sample's worker sends it to the group, as
// soon as the writer is started) still ends it by its own exit with its
// line: the DatasetWriter starts it with SIGINT and SIGTERM blocked, held
// until it catches them. Unheld, either killed it silently.
func TestDatasetWriterCtrlCAtStart(t *testing.T) {
	py := installedPython(t, "numpy")
	for run := range 3 {
		dir := t.TempDir()
		script := `
import os, signal, time
import numpy as np
from ffcvfs.fields import IntField, RGBImageField
from ffcvfs.writer import DatasetWriter

class AtOnce:
    def __len__(self):
        return 1000
    def __getitem__(self, i):
        if i == 0:
            os.killpg(0, signal.SIGINT)
        time.sleep(0.01)  # the write cannot end before the interrupt
        return np.full((8, 8, 3), i % 256, np.uint8), i

DatasetWriter("early.beton", {"image": RGBImageField(), "label": IntField()}, num_workers=1).from_indexed_dataset(AtOnce())
`
		cmd := exec.Command(py, "-c", script)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		out := stderr.String()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGINT || strings.Count(out, "interrupted; early.beton was not written") != 1 ||
			!strings.HasSuffix(strings.TrimSpace(out), "KeyboardInterrupt") {
			t.Fatalf("run %d: %v; stderr after a Ctrl-C at the start:\n%s\nwant ffcvfs write's line once and one KeyboardInterrupt", run, err, out)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 0 {
			t.Errorf("run %d left behind: %v", run, ents)
		}
	}
}

// TestDatasetWriterProgressBar: a DatasetWriter run on a terminal (a
// pseudo-terminal, by script(1)) shows ffcvfs write's progress bar with
// its rate; on a pipe it shows none. It never drew: ffcvfs write's
// standard error is a pipe to the writing process.
func TestDatasetWriterProgressBar(t *testing.T) {
	py := installedPython(t, "numpy")
	scriptTool := testenv.LookPath(t, "script")
	dir := t.TempDir()
	prog := filepath.Join(dir, "write.py")
	if err := os.WriteFile(prog, []byte(`
import numpy as np
from ffcvfs.fields import IntField, RGBImageField
from ffcvfs.writer import DatasetWriter

class Small:
    def __len__(self):
        return 300
    def __getitem__(self, i):
        return np.full((32, 32, 3), i % 256, np.uint8), i

DatasetWriter("small.beton", {"image": RGBImageField(), "label": IntField()}, num_workers=2).from_indexed_dataset(Small())
print("written")
`), 0o644); err != nil {
		t.Fatal(err)
	}
	// On a terminal.
	cmd := exec.Command(scriptTool, "-qec", py+" "+prog, "/dev/null")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "written") {
		t.Fatalf("under a terminal: %v\n%q", err, out)
	}
	if !strings.Contains(string(out), "write [") || !strings.Contains(string(out), "300/300 samples") || !strings.Contains(string(out), "samples/s") {
		t.Errorf("no progress bar on a terminal:\n%q", out)
	}
	// On a pipe: none, whatever the environment held.
	cmd = exec.Command(py, prog)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "FFCVFS_PROGRESS=1")
	out, err = cmd.CombinedOutput()
	if err != nil || strings.Contains(string(out), "write [") {
		t.Errorf("on a pipe: %v\n%q", err, out)
	}
}

// TestRGBImageFieldRestartInterval: RGBImageField's restart_interval is 4
// unless given, 0 turns it off, and a value outside 0 to 65535 MCUs is a
// ValueError naming it, before anything runs.
func TestRGBImageFieldRestartInterval(t *testing.T) {
	py := installedPython(t, "numpy")
	out, err := exec.Command(py, "-c", `
from ffcvfs.fields import RGBImageField
for bad in (-1, 65536, 1 << 40):
    try:
        RGBImageField(write_mode="jpg", restart_interval=bad)
    except ValueError as e:
        assert "restart_interval" in str(e), e
    else:
        raise SystemExit(f"restart_interval={bad} accepted")
assert RGBImageField().spec("image")["restart_interval"] == 4
assert RGBImageField(restart_interval=0).spec("image")["restart_interval"] == 0
print("ok")
`).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Errorf("%v\n%s", err, out)
	}
}
