package integration

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// elasticScript reads epoch 2 of a mount with DataLoaders over the
// samplers of W0 ranks, stops every rank after K batches, and resumes from
// rank 0's state_dict() (through JSON) with W1 ranks, each reading its
// whole share of the rest; then reads rank 0's share again, for
// determinism. For the chain case it stops the W1 ranks too, after K2
// batches, and resumes from that with W2. Loaders give sample ids (the
// file names).
const elasticScript = `
import json, os, sys
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
from ffcvfs import QuasiRandomSampler, RandomSampler

mnt, B, EPOCH = sys.argv[1], 4, 2
cases = json.loads(sys.argv[2])

def head(path):
    with open(path, "rb") as f:
        f.read(16)
    return path

ds = ImageFolder(mnt, loader=head)

def collate(batch):
    return [int(os.path.basename(p).split(".")[0]) for p, _ in batch]

def read(cls, world, state, stop, workers):
    """Reads every rank of world; each stops after stop batches (None: the
    whole share). Returns the samples per rank and rank 0's state."""
    got, state0 = [], None
    for r in range(world):
        s = cls(mnt, seed=3 if state is None else 0, rank=r, world_size=world)
        if state is not None:
            s.load_state_dict(state)
            s.set_epoch(state["epoch"])
        else:
            s.set_epoch(EPOCH)
        loader = DataLoader(ds, batch_size=B, sampler=s, num_workers=workers if r == 0 else 0, collate_fn=collate)
        ids = []
        for i, b in enumerate(loader):
            if stop is not None and i == stop:
                break
            ids += b
        got.append(ids)
        if r == 0 and stop is not None:
            state0 = json.loads(json.dumps(s.state_dict(consumed=stop * B)))
        del loader
    return got, state0

out = []
for c in cases:
    cls = {"quasi-random": QuasiRandomSampler, "random": RandomSampler}[c["kind"]]
    parts, state = [], None
    for i, world in enumerate(c["chain"]):
        last = i == len(c["chain"]) - 1
        got, state1 = read(cls, world, state, None if last else c["stops"][i], 2)
        parts.append(got)
        if not last:
            state = state1
    again, _ = read(cls, c["chain"][-1], state, None, 0)
    out.append({"parts": parts, "again": again, "state": state})
print(json.dumps(out))
`

// writeRawBeton writes the fixture photos as raw images of at most 192
// pixels in 2 MiB pages: 200 samples in 10 pages, pages for 8 ranks. The
// file is closed at the end of the test.
func writeRawBeton(t *testing.T) (string, *beton.File) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "raw.beton")
	run(t, 0, binary(t, "ffcvfs"), "write", "--mode", "raw", "--max-resolution", "192", "--page-size", "2MiB",
		testenv.Fixture(t, "imagefolder-small"), src)
	f, err := beton.OpenFile(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if f.NumPages() < 8 {
		t.Fatalf("the test beton has %d pages, want 8 or more", f.NumPages())
	}
	return src, f
}

type elasticCase struct {
	Kind  string `json:"kind"`
	Chain []int  `json:"chain"`
	Stops []int  `json:"stops"`
}

// TestSamplerElasticResume: a job stopped mid-epoch at one world size and
// resumed at another (8→6, 6→8, 4→1, 1→3, and 8→6→3), at several points,
// through the samplers with real DataLoaders over a real mount: the epoch
// delivers every sample, none twice across the parts; the ranks of the
// rest get equal counts and no sample of another rank's; a quasi-random
// rest splits no page between ranks; and the same state gives the same
// orders.
func TestSamplerElasticResume(t *testing.T) {
	py := installedPython(t, "torch", "torchvision")
	src, f := writeRawBeton(t)
	mnt := mountBeton(t, src)

	var cases []elasticCase
	for _, kind := range []string{"quasi-random", "random"} {
		for _, ch := range [][2]int{{8, 6}, {6, 8}, {4, 1}, {1, 3}} {
			for _, stop := range []int{0, 2, 4} {
				cases = append(cases, elasticCase{kind, ch[:], []int{stop}})
			}
		}
		cases = append(cases, elasticCase{kind, []int{8, 6, 3}, []int{2, 3}})
	}
	arg, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	stdout, _ := run(t, 0, py, "-c", elasticScript, mnt, string(arg))
	var got []struct {
		Parts [][][]int
		Again [][]int
		State map[string]any
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(got) != len(cases) {
		t.Fatalf("%d results for %d cases", len(got), len(cases))
	}
	n := f.NumSamples()
	for i, c := range cases {
		name := fmt.Sprintf("%s/%v/stops-%v", c.Kind, c.Chain, c.Stops)
		r := got[i]
		before := map[int]bool{}
		for _, part := range r.Parts[:len(r.Parts)-1] {
			for _, ids := range part {
				for _, id := range ids {
					if before[id] && !slices.Contains(ids, id) {
						t.Errorf("%s: sample %d read by two ranks before the resume", name, id)
					}
					before[id] = true
				}
			}
		}
		rest := r.Parts[len(r.Parts)-1]
		owner := map[int]int{}
		pageOwner := map[int64]int{}
		for rank, ids := range rest {
			if len(ids) != len(rest[0]) {
				t.Errorf("%s: rank %d of the rest reads %d samples, rank 0 %d", name, rank, len(ids), len(rest[0]))
			}
			for _, id := range ids {
				if before[id] {
					t.Errorf("%s: rank %d of the rest reads sample %d, read before the resume", name, rank, id)
				}
				if o, ok := owner[id]; ok && o != rank {
					t.Errorf("%s: sample %d is read by ranks %d and %d of the rest", name, id, o, rank)
				}
				owner[id] = rank
				if c.Kind == "quasi-random" {
					p := f.SamplePage(id)
					if o, ok := pageOwner[p]; ok && o != rank {
						t.Errorf("%s: page %d is split between ranks %d and %d of the rest", name, p, o, rank)
					}
					pageOwner[p] = rank
				}
			}
		}
		for id := range n {
			if !before[id] && owner[id] == 0 && !slices.Contains(rest[0], id) {
				t.Errorf("%s: sample %d is read by no part of the epoch", name, id)
			}
		}
		for rank := range rest {
			if !slices.Equal(rest[rank], r.Again[rank]) {
				t.Errorf("%s: rank %d read another rest from the same state the second time", name, rank)
			}
		}
		if c.Stops[len(c.Stops)-1] > 0 {
			if segs, _ := r.State["segments"].([]any); len(segs) != len(c.Chain)-2 {
				t.Errorf("%s: the last state has segments %v, want %d", name, r.State["segments"], len(c.Chain)-2)
			}
		}
	}
}

// feedElasticClient reads, for each socket of argv[2] (a JSON list), K
// batches (argv[3]; -1: all), and prints per socket the sha256 of every
// image it got, then rank 0's state_dict() and its resume_args() for the
// world size argv[4]; with argv[5], a state, each loader first loads it.
const feedElasticClient = `
import hashlib, json, sys
from ffcvfs import Loader

socks, K, world = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
state = json.loads(sys.argv[4]) if len(sys.argv) > 4 else None
out = {"images": [], "state": None, "args": None}
for i, sock in enumerate(socks):
    got, n = [], 0
    with Loader(sock) as loader:
        if state is not None:
            loader.load_state_dict(state)
        done = False
        for e in range(loader.epochs):
            for images, labels in loader:
                got += [hashlib.sha256(im.tobytes()).hexdigest() for im in images]
                n += 1
                if n == K:
                    done = True
                    break
            if done or state is not None:
                break
        if i == 0:
            out["state"] = loader.state_dict()
            out["args"] = loader.resume_args(world_size=world)
    out["images"].append(got)
print(json.dumps(out))
`

// TestFeedElasticResume: ffcvfeed servers of W0 ranks, stopped after K
// batches each, resumed by W1 servers started with the flags rank 0's
// Loader.resume_args(world_size=W1) gives (8→6, 6→8, 4→1, 1→3, at several
// points): the images before and after are the epoch's, each once, none
// before and after, every rank of the rest delivers as many, and the same
// state gives the same rest.
func TestFeedElasticResume(t *testing.T) {
	py := installedPython(t, "numpy")
	src, _ := writeRawBeton(t)
	// Center crops without flips: a sample's image is the same in every
	// epoch and part, so its hash names it.
	flags := []string{"--batch-size", "4", "--resolution", "24", "--crop", "center", "--flip", "0", "--epochs", "1", "--workers", "1", "--slots", "2", "--seed", "9"}
	serve := func(world int, extra ...string) []string {
		var socks []string
		for r := range world {
			args := append(slices.Clone(flags), "--rank", fmt.Sprint(r), "--world-size", fmt.Sprint(world))
			socks = append(socks, startFeed(t, src, append(args, extra...)...).sock)
		}
		return socks
	}
	client := func(socks []string, k, world int, state ...string) (images [][]string, st map[string]any, args []string) {
		sj, _ := json.Marshal(socks)
		stdout, _ := run(t, 0, py, append([]string{"-c", feedElasticClient, string(sj), fmt.Sprint(k), fmt.Sprint(world)}, state...)...)
		var out struct {
			Images [][]string
			State  map[string]any
			Args   []string
		}
		if err := json.Unmarshal([]byte(stdout), &out); err != nil {
			t.Fatalf("%v: %s", err, stdout)
		}
		return out.Images, out.State, out.Args
	}
	ref, _, _ := client(serve(1), -1, 1)
	all := map[string]bool{}
	for _, h := range ref[0] {
		all[h] = true
	}
	if len(all) != 200 {
		t.Fatalf("the reference epoch has %d distinct images, want 200", len(all))
	}
	type feedCase struct{ w0, w1, stop int }
	cases := []feedCase{{8, 6, 3}, {6, 8, 1}, {6, 8, 5}, {4, 1, 3}, {1, 3, 1}, {1, 3, 20}}
	for i, c := range cases {
		w0, w1 := c.w0, c.w1
		name := fmt.Sprintf("%d→%d after %d batches", w0, w1, c.stop)
		before, st, args := client(serve(w0), c.stop, w1)
		if !slices.Contains(args, "--resume") {
			t.Errorf("%s: resume_args(world_size=%d) = %v, want --resume", name, w1, args)
			continue
		}
		state, _ := json.Marshal(st)
		after, _, _ := client(serve(w1, args...), -1, w1, string(state))
		if i == 0 {
			// The same state, the same rest.
			again, _, _ := client(serve(w1, args...), -1, w1, string(state))
			if fmt.Sprint(again) != fmt.Sprint(after) {
				t.Errorf("%s: two resumes from the same state delivered different rests", name)
			}
		}
		seen := map[string]bool{}
		for _, imgs := range before {
			for _, h := range imgs {
				seen[h] = true
			}
		}
		owner := map[string]int{}
		for r, imgs := range after {
			if len(imgs) != len(after[0]) {
				t.Errorf("%s: rank %d of the rest delivers %d images, rank 0 %d", name, r, len(imgs), len(after[0]))
			}
			for _, h := range imgs {
				if !all[h] {
					t.Fatalf("%s: rank %d delivers an image of no sample of the epoch", name, r)
				}
				if seen[h] {
					t.Errorf("%s: rank %d of the rest delivers a sample delivered before the resume", name, r)
				}
				if o, ok := owner[h]; ok && o != r {
					t.Errorf("%s: ranks %d and %d of the rest deliver the same sample", name, o, r)
				}
				owner[h] = r
			}
		}
		missing := 0
		for h := range all {
			if !seen[h] && owner[h] == 0 && !slices.Contains(after[0], h) {
				missing++
			}
		}
		if missing > 0 {
			t.Errorf("%s: %d samples of the epoch are delivered by no part", name, missing)
		}
	}
}

// nodeAffineScript reads epochs 0-2 of a mount with the samplers of 4
// ranks on 2 nodes (node-affine, move 0 and 0.5) and prints each rank's
// sample ids per epoch.
const nodeAffineScript = `
import json, os, sys
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
from ffcvfs import QuasiRandomSampler, RandomSampler

mnt = sys.argv[1]
ds = ImageFolder(mnt, loader=lambda p: p)

def collate(batch):
    return [int(os.path.basename(p).split(".")[0]) for p, _ in batch]

out = {}
for cls in (QuasiRandomSampler, RandomSampler):
    for move in (0.0, 0.5):
        epochs = []
        for e in range(3):
            ranks = []
            for r in range(4):
                s = cls(mnt, seed=4, rank=r, world_size=4, nodes=2, move=move)
                s.set_epoch(e)
                ranks.append([i for b in DataLoader(ds, batch_size=8, sampler=s, collate_fn=collate) for i in b])
            epochs.append(ranks)
        out["%s/%g" % (cls.kind, move)] = epochs
print(json.dumps(out))
`

// TestSamplerNodeAffine: through the samplers over a real mount, a
// node-affine order of 2 nodes of 2 ranks reads every sample once per
// epoch, no page on both nodes; with move 0 each node reads the same pages
// every epoch, and with move 0.5 about half of them change.
func TestSamplerNodeAffine(t *testing.T) {
	py := installedPython(t, "torch", "torchvision")
	src, f := writeRawBeton(t)
	mnt := mountBeton(t, src)
	stdout, _ := run(t, 0, py, "-c", nodeAffineScript, mnt)
	var got map[string][][][]int
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(got) != 4 {
		t.Fatalf("%d cases, want 4", len(got))
	}
	for name, epochs := range got {
		var prev [2]map[int64]bool
		for e, ranks := range epochs {
			var pages [2]map[int64]bool
			seen := map[int]bool{}
			for r, ids := range ranks {
				node := r / 2
				if pages[node] == nil {
					pages[node] = map[int64]bool{}
				}
				for _, id := range ids {
					seen[id] = true
					pages[node][f.SamplePage(id)] = true
				}
			}
			if len(seen) != f.NumSamples() {
				t.Errorf("%s epoch %d: %d of %d samples read", name, e, len(seen), f.NumSamples())
			}
			for p := range pages[0] {
				if pages[1][p] {
					t.Errorf("%s epoch %d: page %d is read on both nodes", name, e, p)
				}
			}
			if e > 0 {
				for k := range 2 {
					moved := 0
					for p := range prev[k] {
						if !pages[k][p] {
							moved++
						}
					}
					if name[len(name)-2:] == "/0" && moved != 0 {
						t.Errorf("%s epoch %d: node %d changed %d pages with move 0", name, e, k, moved)
					}
					if name[len(name)-4:] == "/0.5" && (moved < 1 || moved > len(prev[k])-1) {
						t.Errorf("%s epoch %d: node %d changed %d of its %d pages with move 0.5", name, e, k, moved, len(prev[k]))
					}
				}
			}
			prev = pages
		}
	}
}
