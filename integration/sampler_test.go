package integration

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/beton"
	"github.com/ffcvfs/ffcvfs/control"
	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

// samplerScript exercises a sampler class of ffcvfs.sampler (argv[3]) on
// a mount and prints what it saw as JSON.
const samplerScript = `
import json, sys
import ffcvfs.sampler as ffcvfs_sampler
from ffcvfs import NotAnFfcvfsMountError
QuasiRandomSampler = getattr(ffcvfs_sampler, sys.argv[3])

mnt, plain = sys.argv[1], sys.argv[2]
out = {}
s = QuasiRandomSampler(mnt)
out["Len"] = len(s)
out["Epoch0"] = list(s)
out["Epoch0Again"] = list(s)
s.set_epoch(1)
out["Epoch1"] = list(s)
out["Len1"] = len(s)
out["OrderPath"] = s.order_path(0)
ranks = [QuasiRandomSampler(mnt, rank=r, world_size=2) for r in range(2)]
out["RankLens"] = [len(r) for r in ranks]
out["Ranks"] = [list(r) for r in ranks]

def error(f):
    try:
        f()
    except Exception as e:
        return "%s: %s" % (type(e).__name__, e)
    return ""

out["NotAMount"] = error(lambda: QuasiRandomSampler(plain))
out["Missing"] = error(lambda: QuasiRandomSampler(plain + "/missing"))
out["NotAMountIsValueError"] = issubclass(NotAnFfcvfsMountError, ValueError)
out["BadArgs"] = [
    error(lambda: QuasiRandomSampler(mnt, rank=2, world_size=2)),
    error(lambda: QuasiRandomSampler(mnt, rank=-1, world_size=2)),
    error(lambda: QuasiRandomSampler(mnt, world_size=0)),
    error(lambda: QuasiRandomSampler(mnt, seed=-1)),
    error(lambda: QuasiRandomSampler(mnt, seed=1.5)),
    error(lambda: QuasiRandomSampler(mnt, seed=True)),
    error(lambda: s.set_epoch(-1)),
    error(lambda: s.set_epoch("1")),
]
json.dump(out, sys.stdout)
`

// TestSamplers: the Python samplers read the mount's orders (QuasiRandom-
// Sampler the quasi-random ones, RandomSampler the random ones): one
// permutation of the dataset per epoch, the same each time it is read, and
// with two ranks, equal lengths over disjoint pages.
func TestSamplers(t *testing.T) {
	py := installedPython(t, "torch")
	_, out, _ := writeSmallBeton(t)
	mnt := mountBeton(t, out)
	for _, c := range []struct{ class, kind string }{{"QuasiRandomSampler", "quasi-random"}, {"RandomSampler", "random"}} {
		t.Run(c.class, func(t *testing.T) { checkSampler(t, py, mnt, out, c.class, c.kind) })
	}
}

func checkSampler(t *testing.T, py, mnt, out, class, kind string) {
	stdout, _ := run(t, 0, py, "-c", samplerScript, mnt, t.TempDir(), class)
	var r struct {
		OrderPath                   string
		Len, Len1                   int
		Epoch0, Epoch0Again, Epoch1 []int
		RankLens                    []int
		Ranks                       [][]int
		NotAMount, Missing          string
		NotAMountIsValueError       bool
		BadArgs                     []string
	}
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("%v: %.2000s", err, stdout)
	}

	f, err := beton.OpenFile(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := f.NumSamples()
	if r.Len != n || r.Len1 != n || len(r.Epoch0) != n {
		t.Errorf("len %d (epoch 1: %d), epoch 0 has %d indices; the beton has %d samples", r.Len, r.Len1, len(r.Epoch0), n)
	}
	if want := control.Path(mnt, control.OrdersDir, kind, "0", "0"); r.OrderPath != want {
		t.Errorf("order of epoch 0 read from %s, want %s", r.OrderPath, want)
	}
	if !slices.Equal(r.Epoch0, r.Epoch0Again) {
		t.Errorf("epoch 0 read twice gives two orders")
	}
	if slices.Equal(r.Epoch0, r.Epoch1) {
		t.Errorf("epochs 0 and 1 have the same order")
	}
	for e, o := range [][]int{r.Epoch0, r.Epoch1} {
		s := slices.Sorted(slices.Values(o))
		for i := range s {
			if s[i] != i {
				t.Errorf("epoch %d is not a permutation of range(%d): sorted, position %d holds %d", e, n, i, s[i])
				break
			}
		}
	}

	// ImageFolder index i is the i-th file in sorted (class, file name)
	// order; the file name is the sample id.
	var sampleOf []int
	for _, f := range mountedFiles(t, mnt) {
		name := filepath.Base(f)
		id, err := strconv.Atoi(strings.TrimSuffix(name, filepath.Ext(name)))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		sampleOf = append(sampleOf, id)
	}
	if len(sampleOf) != n {
		t.Fatalf("%d files in the mount, %d samples", len(sampleOf), n)
	}
	if len(r.Ranks) != 2 || len(r.RankLens) != 2 {
		t.Fatalf("ranks: %v", r.RankLens)
	}
	if r.RankLens[0] != r.RankLens[1] || len(r.Ranks[0]) != r.RankLens[0] || len(r.Ranks[1]) != r.RankLens[1] {
		t.Errorf("ranks' lengths %v, iterated %d and %d", r.RankLens, len(r.Ranks[0]), len(r.Ranks[1]))
	}
	pageRank := map[int64]int{}
	covered := make([]bool, n)
	for rank, idx := range r.Ranks {
		for _, i := range idx {
			if i < 0 || i >= n {
				t.Fatalf("rank %d: index %d out of range", rank, i)
			}
			covered[sampleOf[i]] = true
			p := f.SamplePage(sampleOf[i])
			if other, ok := pageRank[p]; ok && other != rank {
				t.Errorf("page %d is read by ranks %d and %d", p, other, rank)
			}
			pageRank[p] = rank
		}
	}
	if !slices.Equal(covered, slices.Repeat([]bool{true}, n)) {
		t.Errorf("the two ranks together leave samples out")
	}
	t.Logf("%d samples in %d pages; ranks of 2: %d each, pages %v", n, f.NumPages(), r.RankLens[0], pageRank)

	if !strings.Contains(r.NotAMount, "NotAnFfcvfsMountError") || !strings.Contains(r.NotAMount, "not an ffcvfs mount") {
		t.Errorf("a plain folder as root: %q", r.NotAMount)
	}
	if !strings.Contains(r.Missing, "not an ffcvfs mount") {
		t.Errorf("a missing root: %q", r.Missing)
	}
	if !r.NotAMountIsValueError {
		t.Errorf("NotAnFfcvfsMountError is not a ValueError")
	}
	for i, e := range r.BadArgs {
		if !strings.HasPrefix(e, "ValueError: ") {
			t.Errorf("bad argument %d: %q, want a ValueError", i, e)
		}
	}
	if f.NumPages() < 2 {
		t.Errorf("the beton has %d pages; the rank check needs 2 or more", f.NumPages())
	}
}

// samplerHostileScript loads states with infinities, fractions, huge lists
// and absurd numbers into both samplers of the mount argv[1], and prints,
// for each, the exception's type and its message's length.
const samplerHostileScript = `
import json, sys
from ffcvfs import QuasiRandomSampler, RandomSampler

mnt = sys.argv[1]
good = {"kind": "", "seed": 0, "epoch": 0, "position": 0, "rank": 0, "world_size": 1, "segments": [], "nodes": 1, "move": 0.0}
hostile = [
    {"epoch": float("inf")}, {"nodes": float("inf")}, {"position": 0.9}, {"segments": [[1, 0]] * 10**6},
    {"segments": [[1 << 40, 0]]}, {"segments": [[1 << 20, 0]] * 4}, {"world_size": 1 << 40}, {"rank": 5, "world_size": 2},
    {"seed": -1}, {"position": 1 << 40}, {"kind": "x" * 10**6}, {"segments": "x" * 10**6}, {"nodes": 3, "world_size": 2},
]
out = []
for cls in (QuasiRandomSampler, RandomSampler):
    s = cls(mnt, seed=0)
    for h in hostile:
        st = dict(good, kind=cls.kind)
        st.update(h)
        try:
            s.load_state_dict(st)
            out.append(["accepted", 0])
        except Exception as e:
            out.append([type(e).__name__, len(str(e))])
    s.load_state_dict(dict(good, kind=cls.kind))
    out.append(["good", len(list(s))])
print(json.dumps(out))
`

// TestSamplerHostileStates: a sampler's load_state_dict
// given infinities (epoch, nodes), fractions (position 0.9), a million
// segments, world sizes past the mount's bound, or megabytes of text is a
// ValueError with a short sentence, and the sampler still loads a good
// state; it used to raise OverflowError, take 0.9 as a position, accept
// segments of world size 2^40, and quote megabytes.
func TestSamplerHostileStates(t *testing.T) {
	py := installedPython(t, "torch")
	mnt := mountBeton(t, testenv.Fixture(t, "beton", "imagefolder-jpg.beton"))
	stdout, _ := run(t, 0, py, "-c", samplerHostileScript, mnt)
	var got [][2]any
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	for i, g := range got {
		if g[0] == "good" {
			if g[1].(float64) != 200 {
				t.Errorf("case %d: a good state after the hostile ones: %v samples, want 200", i, g[1])
			}
			continue
		}
		if g[0] != "ValueError" || g[1].(float64) > 300 {
			t.Errorf("hostile state %d: %v (message of %v characters), want a ValueError of a short sentence", i%14, g[0], g[1])
		}
	}
}
