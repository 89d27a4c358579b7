package decode

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os/exec"
	"sort"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

type cropStats struct {
	Area, LogAR, X, Y [2]float64 // mean, std
	areas             []float64
}

func statsOf(crops [][4]int, w, h int) cropStats {
	var s cropStats
	n := float64(len(crops))
	var sum, sq [4]float64
	for _, c := range crops {
		v := [4]float64{
			float64(c[2]*c[3]) / float64(w*h),
			math.Log(float64(c[2]) / float64(c[3])),
			float64(c[0]) / float64(w),
			float64(c[1]) / float64(h),
		}
		s.areas = append(s.areas, v[0])
		for i := range v {
			sum[i] += v[i]
			sq[i] += v[i] * v[i]
		}
	}
	ms := func(i int) [2]float64 {
		m := sum[i] / n
		return [2]float64{m, math.Sqrt(sq[i]/n - m*m)}
	}
	s.Area, s.LogAR, s.X, s.Y = ms(0), ms(1), ms(2), ms(3)
	sort.Float64s(s.areas)
	return s
}

const torchCrops = `
import json, torch
from torchvision.transforms import RandomResizedCrop
torch.manual_seed(1234)
img = torch.empty(3, 375, 500)
out = []
for _ in range(20000):
    i, j, h, w = RandomResizedCrop.get_params(img, (0.08, 1.0), (3/4, 4/3))
    out.append((j, i, w, h))
print(json.dumps(out))
`

func TestRandomResizedCropMatchesTorchvision(t *testing.T) {
	const w, h, n = 500, 375, 20000
	rng := rand.New(rand.NewPCG(7, 8))
	var ours [][4]int
	for range n {
		x, y, cw, ch := RandomResizedCropParams(rng, w, h, DefaultScale, DefaultRatio)
		if cw <= 0 || ch <= 0 || x < 0 || y < 0 || x+cw > w || y+ch > h {
			t.Fatalf("crop %d,%d %dx%d outside %dx%d", x, y, cw, ch, w, h)
		}
		ours = append(ours, [4]int{x, y, cw, ch})
	}
	if exec.Command("/usr/bin/python3", "-c", "import torchvision").Run() != nil {
		testenv.Missing(t, "/usr/bin/python3 with torchvision")
	}
	out, err := exec.Command("/usr/bin/python3", "-c", torchCrops).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var theirs [][4]int
	if err := json.Unmarshal(out, &theirs); err != nil {
		t.Fatal(err)
	}
	a, b := statsOf(ours, w, h), statsOf(theirs, w, h)
	for _, c := range []struct {
		name     string
		ours, py [2]float64
	}{{"area fraction", a.Area, b.Area}, {"log aspect", a.LogAR, b.LogAR}, {"x/W", a.X, b.X}, {"y/H", a.Y, b.Y}} {
		t.Logf("%-13s mean Go %.4f torch %.4f   std Go %.4f torch %.4f", c.name, c.ours[0], c.py[0], c.ours[1], c.py[1])
		if math.Abs(c.ours[0]-c.py[0]) > 0.01 {
			t.Errorf("%s: mean %.4f vs torchvision %.4f", c.name, c.ours[0], c.py[0])
		}
		if math.Abs(c.ours[1]-c.py[1]) > 0.03*c.py[1] {
			t.Errorf("%s: std %.4f vs torchvision %.4f", c.name, c.ours[1], c.py[1])
		}
	}
	// Two-sample Kolmogorov–Smirnov statistic on the area fraction; the
	// critical value at α = 0.001 for two samples of 20,000 is about 0.0195.
	d := ksStat(a.areas, b.areas)
	t.Logf("KS statistic on area fraction: %.4f (critical 0.0195 at α=0.001)", d)
	if d > 0.0195 {
		t.Errorf("KS statistic %.4f: area fractions differ", d)
	}
}

func ksStat(a, b []float64) float64 {
	var i, j int
	var d float64
	for i < len(a) && j < len(b) {
		v := min(a[i], b[j])
		for i < len(a) && a[i] <= v {
			i++
		}
		for j < len(b) && b[j] <= v {
			j++
		}
		d = max(d, math.Abs(float64(i)/float64(len(a))-float64(j)/float64(len(b))))
	}
	return d
}

func TestRandomResizedCropFallback(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	// A 1000×10 strip: no attempt fits the height, so the fallback trims the
	// width to 4/3 of the height, centered.
	x, y, cw, ch := RandomResizedCropParams(rng, 1000, 10, DefaultScale, DefaultRatio)
	if cw != 13 || ch != 10 || x != (1000-13)/2 || y != 0 {
		t.Errorf("strip fallback: %d,%d %dx%d", x, y, cw, ch)
	}
	// An aspect inside ratio whose draws cannot fit: the whole image.
	x, y, cw, ch = RandomResizedCropParams(rng, 10, 10, [2]float64{2, 3}, DefaultRatio)
	if x != 0 || y != 0 || cw != 10 || ch != 10 {
		t.Errorf("whole-image fallback: %d,%d %dx%d", x, y, cw, ch)
	}
}

func TestCenterCropParams(t *testing.T) {
	for _, c := range []struct{ w, h, x, y, s int }{
		{500, 375, 86, 23, 328}, // int(0.875*375) = 328
		{256, 256, 16, 16, 224},
		{300, 1000, 19, 369, 262},
	} {
		x, y, cw, ch := CenterCropParams(c.w, c.h, DefaultCenterRatio)
		if x != c.x || y != c.y || cw != c.s || ch != c.s {
			t.Errorf("%dx%d: %d,%d %dx%d, want %d,%d %dx%d", c.w, c.h, x, y, cw, ch, c.x, c.y, c.s, c.s)
		}
	}
}

func TestChooseScale(t *testing.T) {
	for _, c := range []struct{ cw, ch, ow, oh, want int }{
		{160, 160, 160, 160, 8}, {182, 182, 160, 160, 8}, {183, 183, 160, 160, 7}, {319, 400, 160, 160, 5},
		{320, 320, 160, 160, 4}, {430, 430, 160, 160, 3}, {640, 700, 160, 160, 2},
		{1280, 1280, 160, 160, 1}, {5000, 5000, 160, 160, 1}, {100, 100, 160, 160, 8}, {1000, 170, 160, 160, 8},
	} {
		if got := ChooseScale(c.cw, c.ch, c.ow, c.oh); got != c.want {
			t.Errorf("ChooseScale(%d,%d,%d,%d) = %d, want %d", c.cw, c.ch, c.ow, c.oh, got, c.want)
		}
	}
	// The smallest m/8 that keeps at least the output's pixels each way.
	rng := rand.New(rand.NewPCG(3, 3))
	for range 100000 {
		cw, ch, ow, oh := 1+rng.IntN(2000), 1+rng.IntN(2000), 1+rng.IntN(500), 1+rng.IntN(500)
		m := ChooseScale(cw, ch, ow, oh)
		fits := func(m int) bool { return m*cw >= 8*ow && m*ch >= 8*oh }
		if m < 1 || m > 8 || m < 8 && !fits(m) || m > 1 && fits(m-1) {
			t.Fatalf("ChooseScale(%d,%d,%d,%d) = %d", cw, ch, ow, oh, m)
		}
	}
}

// TestRandomResizedCropExtremeRatios: torchvision's fallback crop, for
// aspect ratios far from the image's, keeps at least a pixel and no more
// than the image, where it rounded to 0 (or overflowed, for an infinite
// quotient) before; Validate refuses such ratios from flags.
func TestRandomResizedCropExtremeRatios(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ratio := range [][2]float64{{1e300, 1e300}, {1e-300, 1e-300}, {math.Inf(1), math.Inf(1)}, {1e6, 1e7}, {1e-7, 1e-6}} {
		for _, wh := range [][2]int{{300, 200}, {200, 300}, {1, 1}, {65535, 1}} {
			x, y, cw, ch := RandomResizedCropParams(rng, wh[0], wh[1], [2]float64{0.08, 1}, ratio)
			if cw < 1 || ch < 1 || x < 0 || y < 0 || x+cw > wh[0] || y+ch > wh[1] {
				t.Errorf("ratio %v of a %dx%d image: crop %dx%d+%d+%d", ratio, wh[0], wh[1], cw, ch, x, y)
			}
		}
		op := Op{Kind: RandomResizedCrop, OutW: 8, OutH: 8, Ratio: ratio}
		if err := op.Validate(); err == nil {
			t.Errorf("Validate accepts ratio %v", ratio)
		}
	}
	for _, scale := range [][2]float64{{0.5, 2}, {math.NaN(), 1}, {0, 0.5}} {
		if err := (Op{Kind: RandomResizedCrop, OutW: 8, OutH: 8, Scale: scale}).Validate(); err == nil {
			t.Errorf("Validate accepts scale %v", scale)
		}
	}
}
