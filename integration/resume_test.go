package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// samplerResumeScript stops torch DataLoaders over a mount after K batches
// of epoch 1, takes the sampler's state_dict(), round-trips it through
// JSON, and resumes a new sampler from it in a new DataLoader, for both
// samplers, 0, 1 and 4 workers, and each rank of 1 and of 2. It prints,
// per case, the ImageFolder indices of the whole epoch's order, of the K
// batches, of the resumed rest, the state, and the mount's plans after the
// resumed sampler read its order.
const samplerResumeScript = `
import json, sys
from torch.utils.data import DataLoader
from torchvision.datasets import ImageFolder
from ffcvfs import QuasiRandomSampler, RandomSampler

mnt, B, K, EPOCH = sys.argv[1], 8, 5, 1

def raw(path):
    with open(path, "rb") as f:
        f.read()
    return path

ds = ImageFolder(mnt, loader=raw)
index = {p: i for i, (p, _) in enumerate(ds.samples)}

def collate(batch):
    return [index[p] for p, _ in batch]

def plans():
    with open(sys.argv[2]) as f:
        return [p for p in json.load(f)["cache"]["plans"] if p["id"].startswith("order:")]

out = []
for cls in (QuasiRandomSampler, RandomSampler):
    for workers in (0, 1, 4):
        for world in (1, 2):
            for rank in range(world):
                ref = cls(mnt, seed=7, rank=rank, world_size=world)
                ref.set_epoch(EPOCH)
                full = list(ref)

                s = cls(mnt, seed=7, rank=rank, world_size=world)
                s.set_epoch(EPOCH)
                loader = DataLoader(ds, batch_size=B, sampler=s, num_workers=workers, collate_fn=collate)
                first = []
                for i, batch in enumerate(loader):
                    first += batch
                    if i + 1 == K:
                        break
                ahead = s.state_dict()["position"]
                state = json.loads(json.dumps(s.state_dict(consumed=K * B)))
                del loader

                r = cls(mnt, seed=0, rank=rank, world_size=world)
                r.load_state_dict(state)
                r.set_epoch(state["epoch"])
                n = len(r)  # reads the rest of the order, which announces it
                announced = plans()
                loader = DataLoader(ds, batch_size=B, sampler=r, num_workers=workers, collate_fn=collate)
                rest = [i for batch in loader for i in batch]
                after = r.state_dict()
                r.set_epoch(EPOCH + 1)
                out.append({"kind": cls.kind, "workers": workers, "world": world, "rank": rank,
                            "full": full, "first": first, "rest": rest, "state": state, "ahead": ahead,
                            "len": n, "plans": announced, "after": after, "next": len(list(r))})
print(json.dumps(out))
`

type samplerResumeCase struct {
	Kind              string
	Workers, World    int
	Rank              int
	Full, First, Rest []int
	State, After      map[string]any
	Ahead, Len, Next  int
	Plans             []struct {
		ID  string
		Len int
	}
}

// TestSamplerResume: a DataLoader stopped after K batches and resumed
// from its sampler's state_dict() reads the rest of the epoch exactly
// once, in order, for both samplers, 0, 1 and 4 workers and each of 2
// ranks; the mount is told only the rest.
func TestSamplerResume(t *testing.T) {
	py := installedPython(t, "torch", "torchvision")
	mnt := mountBeton(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	stdout, _ := run(t, 0, py, "-c", samplerResumeScript, mnt, control.Path(mnt, control.StatsFile))
	var cases []samplerResumeCase
	if err := json.Unmarshal([]byte(stdout), &cases); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if len(cases) != 2*3*3 {
		t.Fatalf("%d cases, want 18", len(cases))
	}
	const B, K = 8, 5
	for _, c := range cases {
		name := fmt.Sprintf("%s/workers=%d/rank=%d-of-%d", c.Kind, c.Workers, c.Rank, c.World)
		if len(c.Full) <= K*B {
			t.Errorf("%s: an epoch of %d samples, want more than %d", name, len(c.Full), K*B)
			continue
		}
		if !slices.Equal(c.First, c.Full[:K*B]) {
			t.Errorf("%s: the first %d batches are not the start of the epoch's order", name, K)
		}
		if got := append(slices.Clone(c.First), c.Rest...); !slices.Equal(got, c.Full) {
			t.Errorf("%s: stopped and resumed, the epoch read %d samples (%d + %d); want its order of %d, each position once",
				name, len(got), len(c.First), len(c.Rest), len(c.Full))
		}
		if c.Len != len(c.Full)-K*B {
			t.Errorf("%s: len() of the resumed sampler %d, want the rest, %d", name, c.Len, len(c.Full)-K*B)
		}
		want := map[string]any{"kind": c.Kind, "seed": 7.0, "epoch": 1.0, "position": float64(K * B), "rank": float64(c.Rank), "world_size": float64(c.World)}
		for k, v := range want {
			if c.State[k] != v {
				t.Errorf("%s: state_dict()[%q] = %v, want %v (%v)", name, k, c.State[k], v, c.State)
			}
		}
		if c.After["position"] != float64(len(c.Full)) {
			t.Errorf("%s: after the resumed epoch, position %v, want %d", name, c.After["position"], len(c.Full))
		}
		if c.Workers == 0 && c.Ahead != K*B {
			t.Errorf("%s: without workers the sampler handed out %d samples for %d batches, want %d", name, c.Ahead, K, K*B)
		}
		id := fmt.Sprintf("order:uid-%d:%s/7/%d-of-%d", os.Getuid(), c.Kind, c.Rank, c.World)
		found := false
		for _, p := range c.Plans {
			if p.ID == id {
				found = true
				if p.Len != len(c.Full)-K*B {
					t.Errorf("%s: the mount's plan %s holds %d samples, want the rest of the epoch, %d", name, id, p.Len, len(c.Full)-K*B)
				}
			}
		}
		if !found {
			t.Errorf("%s: no plan %s in the mount after the resumed read: %+v", name, id, c.Plans)
		}
		if c.Next != len(c.Full) {
			t.Errorf("%s: the epoch after the resumed one has %d samples, want a whole epoch (%d)", name, c.Next, len(c.Full))
		}
	}
}

// feedResumeClient reads an ffcvfeed server: "all" every batch, "stop"
// the first K, "rest" every batch after loading the state in argv[3].
// It prints a line per batch (epoch, batch, sha256 of its bytes), then
// the loader's state_dict() and resume_args().
const feedResumeClient = `
import hashlib, json, sys
from ffcvfs import FeedError, Loader

sock, mode = sys.argv[1], sys.argv[2]
with Loader(sock) as loader:
    if mode == "rest":
        loader.load_state_dict(json.loads(sys.argv[3]))
    if mode == "wrong":
        try:
            loader.load_state_dict(json.loads(sys.argv[3]))
        except FeedError as e:
            print(json.dumps({"error": str(e)}))
            sys.exit(0)
        sys.exit("load_state_dict accepted a server that starts elsewhere")
    n = 0
    for e in range(loader.epochs):
        for images, labels in loader:
            m = loader.current
            h = hashlib.sha256(images.tobytes() + labels.tobytes()).hexdigest()
            print(json.dumps({"epoch": m["epoch"], "batch": m["batch"], "sha": h}), flush=True)
            n += 1
            if mode == "stop" and n == int(sys.argv[3]):
                break
        if mode == "stop" and n == int(sys.argv[3]):
            break
    print(json.dumps({"state": loader.state_dict(), "args": loader.resume_args()}))
`

type resumeBatch struct {
	Epoch, Batch int
	Sha          string
}

// runFeedResumeClient runs feedResumeClient and returns its batches and
// its last line.
func runFeedResumeClient(t *testing.T, py, sock, mode, arg string) (batches []resumeBatch, last string) {
	t.Helper()
	stdout, _ := run(t, 0, py, "-c", feedResumeClient, sock, mode, arg)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	for _, l := range lines[:len(lines)-1] {
		var b resumeBatch
		if err := json.Unmarshal([]byte(l), &b); err != nil {
			t.Fatalf("%v: %q", err, l)
		}
		batches = append(batches, b)
	}
	return batches, lines[len(lines)-1]
}

// TestFeedResume: an ffcvfeed client stopped after K batches, whose
// server is then killed, resumes from Loader.state_dict() on a server
// started with the --start-epoch and --start-batch it gives; the two
// streams together are the uninterrupted stream, batch for batch and byte
// for byte (the same samples, the same augmentations). A server started
// elsewhere is refused by load_state_dict().
func TestFeedResume(t *testing.T) {
	py := installedPython(t, "numpy")
	beton := testenv.Fixture(t, "beton", "imagefolder-jpg.beton")
	flags := []string{"--batch-size", "16", "--resolution", "32", "--epochs", "2", "--workers", "2", "--slots", "3", "--seed", "5", "--order", "random"}
	const K = 9 // into epoch 0, whose 13 batches end with 8 samples

	ref := startFeed(t, beton, flags...)
	all, _ := runFeedResumeClient(t, py, ref.sock, "all", "")
	ref.waitExit(t)
	if len(all) != 2*13 {
		t.Fatalf("the uninterrupted stream has %d batches, want 26", len(all))
	}

	first := startFeed(t, beton, flags...)
	head, last := runFeedResumeClient(t, py, first.sock, "stop", fmt.Sprint(K))
	var st struct {
		State map[string]any
		Args  []string
	}
	if err := json.Unmarshal([]byte(last), &st); err != nil {
		t.Fatalf("%v: %q", err, last)
	}
	if st.State["epoch"] != 0.0 || st.State["batch"] != float64(K) || !slices.Equal(st.Args, []string{"--start-epoch", "0", "--start-batch", fmt.Sprint(K)}) {
		t.Fatalf("after %d batches: state %v, args %v", K, st.State, st.Args)
	}
	state, _ := json.Marshal(st.State)
	// The state loaded into a client of a server that was not started
	// where it says is refused, with the flags that would resume.
	out, _ := run(t, 0, py, "-c", feedResumeClient, first.sock, "wrong", string(state))
	if !strings.Contains(out, fmt.Sprintf("--start-epoch 0 --start-batch %d", K)) {
		t.Errorf("load_state_dict on a server that did not resume: %s; want the flags that resume", out)
	}
	_ = first.cmd.Process.Kill()

	resumed := startFeed(t, beton, append(slices.Clone(flags), st.Args...)...)
	tail, _ := runFeedResumeClient(t, py, resumed.sock, "rest", string(state))
	resumed.waitExit(t)

	got := append(slices.Clone(head), tail...)
	if len(got) != len(all) {
		t.Errorf("stopped and resumed: %d + %d batches, want %d", len(head), len(tail), len(all))
	}
	for i := range min(len(got), len(all)) {
		if got[i] != all[i] {
			t.Errorf("batch %d of the stream: %+v, want %+v", i, got[i], all[i])
		}
	}
}
