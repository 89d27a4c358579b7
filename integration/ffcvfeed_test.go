package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/ffcvfs/ffcvfs/internal/bytesize"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// feedServeConsumer reads every epoch of an ffcvfeed server with
// the ffcvfs package's Loader and prints one JSON line per epoch, then one with
// loader.ended.
const feedServeConsumer = `
import json, sys
import numpy as np
from ffcvfs import Loader

with Loader(sys.argv[1]) as loader:
    if not {"image", "label"} <= set(loader.field_names):
        sys.exit("fields %r, want image and label" % (loader.field_names,))
    loader.names = ("image", "label")
    print(json.dumps({"fields": loader.field_names, "len": len(loader), "epochs": loader.epochs}), flush=True)
    for e in range(loader.epochs):
        labels, shapes, dtypes, epochs, sizes = [], set(), set(), set(), []
        zero_batches = zero_images = 0
        for images, lab in loader:
            m = loader.current
            epochs.add(m["epoch"])
            sizes.append(m["size"])
            shapes.add(json.dumps(list(images.shape)))
            dtypes.add((str(images.dtype), str(lab.dtype), lab.ndim, int(lab.shape[0]) == m["size"]))
            labels.extend(int(x) for x in lab)
            if images.size == 0 or not images.any():
                zero_batches += 1
            zero_images += int((images.reshape(images.shape[0], -1).max(axis=1) == 0).sum()) if images.size else 0
        print(json.dumps({
            "epoch": e, "msg_epochs": sorted(epochs), "sizes": sizes, "labels": labels,
            "shapes": sorted(json.loads(s) for s in shapes), "dtypes": sorted(list(d) for d in dtypes),
            "zero_batches": zero_batches, "zero_images": zero_images,
        }), flush=True)
    print(json.dumps({"ended": loader.ended}), flush=True)
`

// feedServeEpoch is one per-epoch line of feedServeConsumer.
type feedServeEpoch struct {
	Epoch       int
	MsgEpochs   []int `json:"msg_epochs"`
	Sizes       []int
	Labels      []int64
	Shapes      [][]int
	DTypes      [][4]any // image dtype, label dtype, label ndim, label rows == batch size
	ZeroBatches int      `json:"zero_batches"`
	ZeroImages  int      `json:"zero_images"`
}

// feedProc is a running `ffcvfeed serve`.
type feedProc struct {
	cmd    *exec.Cmd
	sock   string
	log    *testenv.OutputBuffer // stdout and stderr
	exited chan struct{}
}

// startFeed starts `ffcvfeed serve --data data --socket S args...`, waits
// until its socket is there and returns it. t.Cleanup kills the process if
// it still runs.
func startFeed(t *testing.T, data string, args ...string) *feedProc {
	t.Helper()
	ffcvfeed := binary(t, "ffcvfeed")
	p := &feedProc{sock: testenv.Socket(t, "feed.sock"), log: &testenv.OutputBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(ffcvfeed, append([]string{"serve", "--data", data, "--socket", p.sock}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	deadline := time.Now().Add(testenv.Patience)
	for {
		if st, err := os.Stat(p.sock); err == nil && st.Mode().Type() == fs.ModeSocket {
			return p
		}
		select {
		case <-p.exited:
			t.Fatalf("ffcvfeed serve exited before its socket appeared (%s):\n%s", p.cmd.ProcessState, p.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("ffcvfeed serve: socket %s not there in time:\n%s", p.sock, p.log)
		}
	}
}

// waitExit waits up to testenv.Patience for the server to exit by itself and fails the
// test unless it exits with status 0.
func (p *feedProc) waitExit(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(testenv.Patience):
		_ = p.cmd.Process.Signal(syscall.SIGQUIT) // a goroutine dump in the log
		select {
		case <-p.exited:
		case <-time.After(testenv.Patience):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		t.Fatalf("ffcvfeed serve still running long after the consumer finished:\n%s", p.log)
	}
	if !p.cmd.ProcessState.Success() {
		t.Fatalf("ffcvfeed serve: %s after the consumer finished:\n%s", p.cmd.ProcessState, p.log)
	}
}

// folderClassCounts returns the number of files in each class folder of an
// ImageFolder tree, by label (class folders sorted by name, as ImageFolder
// numbers them).
func folderClassCounts(t *testing.T, root string) []int {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var classes []string
	for _, e := range entries {
		if e.IsDir() && e.Name()[0] != '.' {
			classes = append(classes, e.Name())
		}
	}
	sort.Strings(classes)
	counts := make([]int, len(classes))
	for i, c := range classes {
		files, err := os.ReadDir(filepath.Join(root, c))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if f.Type().IsRegular() {
				counts[i]++
			}
		}
	}
	return counts
}

// consumeFeed runs feedServeConsumer on the server's socket and checks each
// epoch: every sample exactly once (the label multiset equals the class
// counts), batches of at most bsz images of res×res×3 uint8 that are not all
// zero, int64 labels, the announced number of batches and epochs, and the
// end of the stream.
func consumeFeed(t *testing.T, p *feedProc, classCounts []int, bsz, res, epochs int) {
	t.Helper()
	py := installedPython(t, "numpy")
	samples := 0
	for _, c := range classCounts {
		samples += c
	}
	perEpoch := (samples + bsz - 1) / bsz

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", feedServeConsumer, p.sock)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python consumer: %v\nstderr:\n%s\nstdout:\n%s\nffcvfeed:\n%s", err, stderr.String(), out, p.log)
	}

	dec := json.NewDecoder(bytes.NewReader(out))
	var head struct {
		Fields      []string
		Len, Epochs int
	}
	if err := dec.Decode(&head); err != nil {
		t.Fatalf("consumer output: %v\n%s", err, out)
	}
	if head.Len != perEpoch || head.Epochs != epochs {
		t.Errorf("loader: %d batches per epoch, %d epochs; want %d, %d (fields %v)", head.Len, head.Epochs, perEpoch, epochs, head.Fields)
	}
	for e := 0; e < epochs; e++ {
		var ep feedServeEpoch
		if err := dec.Decode(&ep); err != nil {
			t.Fatalf("consumer output, epoch %d: %v\n%s", e, err, out)
		}
		name := fmt.Sprintf("epoch %d", e)
		if fmt.Sprint(ep.MsgEpochs) != fmt.Sprint([]int{e}) {
			t.Errorf("%s: batches are of epochs %v", name, ep.MsgEpochs)
		}
		if len(ep.Sizes) != perEpoch {
			t.Errorf("%s: %d batches, want %d (sizes %v)", name, len(ep.Sizes), perEpoch, ep.Sizes)
		}
		for _, s := range ep.Shapes {
			if len(s) != 4 || s[0] < 1 || s[0] > bsz || s[1] != res || s[2] != res || s[3] != 3 {
				t.Errorf("%s: image batch of shape %v, want [≤%d %d %d 3]", name, s, bsz, res, res)
			}
		}
		for _, d := range ep.DTypes {
			if d[0] != "uint8" || d[1] != "int64" || d[2] != 1.0 || d[3] != true {
				t.Errorf("%s: images %v, labels %v of %v dimension(s), label rows = batch size: %v; want uint8 images, int64 labels [B]",
					name, d[0], d[1], d[2], d[3])
			}
		}
		if ep.ZeroBatches != 0 {
			t.Errorf("%s: %d image batches are all zero", name, ep.ZeroBatches)
		}
		if ep.ZeroImages != 0 {
			t.Logf("%s: %d images are all zero", name, ep.ZeroImages)
		}
		got := make([]int, len(classCounts))
		bad := 0
		for _, l := range ep.Labels {
			if l < 0 || l >= int64(len(got)) {
				bad++
				continue
			}
			got[l]++
		}
		if len(ep.Labels) != samples || bad != 0 || fmt.Sprint(got) != fmt.Sprint(classCounts) {
			t.Errorf("%s: %d labels (%d out of range), per class %v; want %d, each sample once: %v",
				name, len(ep.Labels), bad, got, samples, classCounts)
		}
	}
	var tail struct{ Ended *bool }
	if err := dec.Decode(&tail); err != nil || tail.Ended == nil || !*tail.Ended {
		t.Errorf("the consumer did not see the end of the stream (%v):\n%s", err, out)
	}
	if dec.More() {
		t.Errorf("extra consumer output:\n%s", out)
	}
}

// TestFeedServeBeton: ffcvfeed serve on a beton file delivers every sample
// of each of 2 epochs exactly once, as uint8 NHWC crops, to
// the ffcvfs package's Loader, and exits 0 after the last epoch.
func TestFeedServeBeton(t *testing.T) {
	debianPython(t, "numpy")
	src, beton, _ := writeSmallBeton(t)
	counts := folderClassCounts(t, src)
	const bsz, res, epochs = 16, 64, 2
	p := startFeed(t, beton, "--batch-size", strconv.Itoa(bsz), "--resolution", strconv.Itoa(res),
		"--epochs", strconv.Itoa(epochs), "--workers", "2", "--slots", "3", "--order", "quasi-random")
	consumeFeed(t, p, counts, bsz, res, epochs)
	p.waitExit(t)
}

// TestFeedServeMount: ffcvfeed serve on an ffcvfs mount delivers one epoch
// like the beton itself, announces its order through the mount (counted in
// stats.json, and the plan, of every sample, finished by the reads of
// dataset.beton), and the mount reads each page from storage at most once.
func TestFeedServeMount(t *testing.T) {
	debianPython(t, "numpy")
	src, beton, classes := writeSmallBeton(t)
	counts := folderClassCounts(t, src)
	mnt := mountBeton(t, beton, "--classes", classes)
	const bsz, res, epochs = 16, 64, 1
	p := startFeed(t, mnt, "--batch-size", strconv.Itoa(bsz), "--resolution", strconv.Itoa(res),
		"--epochs", strconv.Itoa(epochs), "--workers", "2", "--slots", "3", "--order", "quasi-random")
	consumeFeed(t, p, counts, bsz, res, epochs)
	p.waitExit(t)
	s := readMountStats(t, mnt)
	t.Logf("mount: pages_read %d of %d pages (cache %d slots), misses %d, hits %d, plans %+v",
		s.Cache.PagesRead, s.Pages, s.Cache.Slots, s.Cache.Misses, s.Cache.Hits, s.Cache.Plans)
	if s.Cache.PagesRead == 0 || s.Cache.PagesRead > uint64(s.Pages) {
		t.Errorf("the mount read %d pages from storage for one epoch; want 1 to %d (each page at most once)", s.Cache.PagesRead, s.Pages)
	}
	if s.Announced != epochs {
		t.Errorf("stats.json counts %d announced orders, want %d: ffcvfeed did not announce its order through the mount", s.Announced, epochs)
	}
	// Reads of dataset.beton advance the plan like reads of the images:
	// once the epoch is delivered, nothing of it is left.
	if len(s.Cache.Plans) != 0 {
		t.Errorf("stats.json still lists plans %+v after the epoch: reads of dataset.beton did not advance the announced order", s.Cache.Plans)
	}
}

// TestDecodedCacheRSS: the decoded-image cache costs the resident size its
// size says and no more: ffcvfeed bench over three epochs with a cache of
// half the planes' bytes peaks at most 10 % above the run without it plus
// the cache's size, and holds no more than that size; the cache holding
// every image does likewise with its bytes held.
func TestDecodedCacheRSS(t *testing.T) {
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	bench := []string{"bench", "--data", beton, "--resolution", "64", "--workers", "2", "--epochs", "3", "--batch-size", "32"}
	_, without, err := runPeak(t, binary(t, "ffcvfeed"), bench...)
	if err != nil {
		t.Fatal(err)
	}
	held := regexp.MustCompile(`epoch 2: decoded-image cache: (\d+) hits, \d+ misses \(\d+ not held\); holds (\d+) images, .* \((\d+) bytes\) in RAM`)
	check := func(size string) int64 {
		t.Helper()
		out, peak, err := runPeak(t, binary(t, "ffcvfeed"), append(bench, "--decoded-cache-size", size)...)
		if err != nil {
			t.Fatalf("--decoded-cache-size %s: %v\n%s", size, err, out)
		}
		m := held.FindSubmatch(out)
		if m == nil {
			t.Fatalf("--decoded-cache-size %s: no figures of the cache:\n%s", size, out)
		}
		hits, images, bytes := atoi(t, string(m[1])), atoi(t, string(m[2])), int64(atoi(t, string(m[3])))
		limit, err := bytesize.Parse(size)
		if err != nil {
			t.Fatal(err)
		}
		if bytes > limit || hits != images || images == 0 {
			t.Errorf("--decoded-cache-size %s: holds %d images, %d bytes; the last epoch made %d from it", size, images, bytes, hits)
		}
		if max := (without + bytes) * 11 / 10; peak > max {
			t.Errorf("--decoded-cache-size %s: peak RSS %d MiB holding %d MiB; without the cache %d MiB: more than 10 %% over their sum",
				size, peak>>20, bytes>>20, without>>20)
		}
		t.Logf("--decoded-cache-size %s: peak RSS %.1f MiB holding %d images, %.1f MiB; without the cache %.1f MiB",
			size, float64(peak)/(1<<20), images, float64(bytes)/(1<<20), float64(without)/(1<<20))
		return bytes
	}
	all := check("1GiB")
	check(strconv.FormatInt(all/2, 10))
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
