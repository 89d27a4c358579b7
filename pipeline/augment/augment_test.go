package augment

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// golden is FFCV's output of one transform on a batch, with its draws
// (scripts/make_ffcv_goldens.py).
type golden struct {
	Op     string
	Params json.RawMessage
	Draws  [][]json.RawMessage
	DType  string
	Shape  []int
	Output string
}

type goldens struct {
	Width, Height int
	Images        string
	Labels        []int64
	Indices       []int64
	Cases         []golden
}

func loadGoldens(t *testing.T) goldens {
	t.Helper()
	f, err := os.Open("testdata/ffcv-transforms.json.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var g goldens
	if err := json.NewDecoder(z).Decode(&g); err != nil {
		t.Fatal(err)
	}
	return g
}

func b64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// draws returns the values of the case's draws of one kind, in order.
func (c golden) draws(t *testing.T, kind string) []float64 {
	t.Helper()
	var out []float64
	for _, d := range c.Draws {
		var k string
		var v []float64
		if err := json.Unmarshal(d[0], &k); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(d[1], &v); err != nil {
			t.Fatal(err)
		}
		if k == kind {
			out = append(out, v...)
		}
	}
	return out
}

func firstDiff(a, b []byte) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return fmt.Sprintf("byte %d: %d, FFCV %d", i, a[i], b[i])
		}
	}
	return fmt.Sprintf("lengths %d and %d", len(a), len(b))
}

// TestMatchesFFCV applies each transform with FFCV's draws to the photos
// FFCV transformed and compares the bytes with FFCV's output.
func TestMatchesFFCV(t *testing.T) {
	g := loadGoldens(t)
	w, h := g.Width, g.Height
	per := w * h * 3
	src := b64(t, g.Images)
	n := len(src) / per
	seen := map[string]int{}
	for ci, c := range g.Cases {
		want := b64(t, c.Output)
		imgs := bytes.Clone(src)
		name := fmt.Sprintf("case %d (%s %s)", ci, c.Op, c.Params)
		seen[c.Op]++
		switch c.Op {
		case "flip":
			var p struct{ P float64 }
			json.Unmarshal(c.Params, &p)
			for i, r := range c.draws(t, "rand") {
				if r < p.P {
					img := imgs[i*per : (i+1)*per]
					for y := range h {
						slices.Reverse(img[y*w*3 : (y+1)*w*3]) // reverses channels too:
						for x := 0; x < w; x++ {
							px := img[y*w*3+3*x:]
							px[0], px[2] = px[2], px[0]
						}
					}
				}
			}
		case "translate":
			var p struct {
				Padding int
				Fill    [3]uint8
			}
			json.Unmarshal(c.Params, &p)
			d := c.draws(t, "randint")
			scratch := make([]byte, per)
			for i := range n {
				Translate(imgs[i*per:(i+1)*per], w, h, p.Padding, int(d[2*i]), int(d[2*i+1]), p.Fill, scratch)
			}
		case "cutout":
			var p struct {
				Size int
				Fill [3]uint8
			}
			json.Unmarshal(c.Params, &p)
			d := c.draws(t, "randint")
			for i := range n {
				Cutout(imgs[i*per:(i+1)*per], w, h, p.Size, int(d[2*i]), int(d[2*i+1]), p.Fill)
			}
		case "brightness", "contrast", "saturation":
			var p Jitter
			json.Unmarshal(c.Params, &p)
			apply, f := c.draws(t, "rand"), c.draws(t, "uniform")
			for i := range n {
				if apply[i] < p.P {
					img := imgs[i*per : (i+1)*per]
					map[string]func([]byte, float64){"brightness": Brightness, "contrast": Contrast, "saturation": Saturation}[c.Op](img, f[i])
				}
			}
		case "image_mixup":
			lam := c.draws(t, "beta")
			if len(lam) == 1 {
				lam = slices.Repeat(lam, n)
			}
			MixImages(imgs, n, per, lam, make([]byte, per))
		case "label_mixup":
			lam := c.draws(t, "beta")
			if len(lam) == 1 {
				lam = slices.Repeat(lam, n)
			}
			out := make([]float32, 3*n)
			MixLabels(g.Labels, lam, out)
			imgs = binary.LittleEndian.AppendUint32(nil, 0)[:0]
			for _, v := range out {
				imgs = binary.LittleEndian.AppendUint32(imgs, math.Float32bits(v))
			}
		case "replace_label":
			var p struct {
				Indices  []uint32
				NewLabel int64 `json:"new_label"`
			}
			json.Unmarshal(c.Params, &p)
			r := NewReplaceLabel(p.Indices, p.NewLabel)
			imgs = nil
			for i, l := range g.Labels {
				imgs = binary.LittleEndian.AppendUint64(imgs, uint64(r.Label(g.Indices[i], l)))
			}
		case "poison":
			var p struct {
				Mask, Alpha string
				Indices     []int64
				Clamp       [2]float64
			}
			json.Unmarshal(c.Params, &p)
			alphaBytes := b64(t, p.Alpha)
			alpha := make([]float64, len(alphaBytes)/8)
			for i := range alpha {
				alpha[i] = math.Float64frombits(binary.LittleEndian.Uint64(alphaBytes[8*i:]))
			}
			po := &Poison{Mask: b64(t, p.Mask), Alpha: alpha, Clamp: p.Clamp}
			for i := range n {
				if slices.Contains(p.Indices, g.Indices[i]) {
					po.Apply(imgs[i*per : (i+1)*per])
				}
			}
		default:
			t.Fatalf("%s: unknown op", name)
		}
		if !bytes.Equal(imgs, want) {
			t.Errorf("%s: differs from FFCV's output: %s", name, firstDiff(imgs, want))
		}
	}
	for _, op := range []string{"flip", "translate", "cutout", "brightness", "contrast", "saturation", "image_mixup", "label_mixup", "replace_label", "poison"} {
		if seen[op] == 0 {
			t.Errorf("no golden case of %s", op)
		}
	}
}

// TestDrawDistributions: Apply's draws follow FFCV's distributions: shifts
// and cutout places uniform over their ranges, jitters applied with their
// probability by factors uniform over theirs, Beta(α, α) for mixup.
func TestDrawDistributions(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const trials = 40000
	// Translate: a 1×1 image on a black canvas shows where the window
	// fell: the pixel survives only for the centre shift (dy = dx = pad).
	o := Options{TranslatePad: 1}
	kept := 0
	for range trials {
		img := []byte{9, 9, 9}
		o.Apply(rng, img, 1, 1, make([]byte, 3))
		if img[0] == 9 {
			kept++
		}
	}
	if f := float64(kept) / trials; math.Abs(f-1.0/9) > 0.01 {
		t.Errorf("translate pad 1: the centre shift drawn %.4f of the time, want 1/9", f)
	}
	// Cutout of side 1 on a 4×1 image: each column equally often.
	o = Options{CutoutSize: 1, CutoutFill: [3]uint8{1, 1, 1}}
	cols := make([]int, 4)
	for range trials {
		img := make([]byte, 12)
		o.Apply(rng, img, 4, 1, nil)
		cols[bytes.IndexByte(img, 1)/3]++
	}
	for c, k := range cols {
		if f := float64(k) / trials; math.Abs(f-0.25) > 0.015 {
			t.Errorf("cutout: column %d drawn %.4f of the time, want 0.25", c, f)
		}
	}
	// Brightness 0.5 with p 0.3 on a value of 100: unchanged 70 % of the
	// time; otherwise uniform over [50, 150].
	o = Options{Brightness: Jitter{Magnitude: 0.5, P: 0.3}}
	var changed, sum float64
	for range trials {
		img := []byte{100, 100, 100}
		o.Apply(rng, img, 1, 1, nil)
		if img[0] != 100 {
			changed++
			sum += float64(img[0])
		}
	}
	if f := changed / trials; math.Abs(f-0.3) > 0.015 {
		t.Errorf("brightness p 0.3: applied %.4f of the time", f)
	}
	if m := sum / changed; math.Abs(m-99.5) > 1.5 { // truncation lowers the mean by 0.5
		t.Errorf("brightness magnitude 0.5: mean %.2f of 100 scaled, want about 99.5", m)
	}
	// Beta(0.2, 0.2): mean 1/2, variance 1/(4·(2α+1)) = 0.1786.
	lam := make([]float64, trials)
	Lambdas(rng, 0.2, false, lam)
	var mean, m2 float64
	for _, l := range lam {
		if l < 0 || l > 1 {
			t.Fatalf("λ %v outside [0, 1]", l)
		}
		mean += l
	}
	mean /= trials
	for _, l := range lam {
		m2 += (l - mean) * (l - mean)
	}
	if v := m2 / trials; math.Abs(mean-0.5) > 0.01 || math.Abs(v-0.1786) > 0.01 {
		t.Errorf("Beta(0.2, 0.2): mean %.4f variance %.4f, want 0.5 and 0.1786", mean, v)
	}
	Lambdas(rng, 0.2, true, lam[:5])
	if lam[1] != lam[0] || lam[4] != lam[0] {
		t.Errorf("same λ for the batch: %v", lam[:5])
	}
}
