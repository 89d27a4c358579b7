package decode

import (
	"github.com/ffcvfs/ffcvfs/jpeg"

	"github.com/ffcvfs/ffcvfs/internal/testenv"

	"bytes"
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ffcvfs/ffcvfs/resize"
	libjpeg "github.com/pixiv/go-libjpeg/jpeg"
)

// powerOfTwoScale is the scale rule before M/8 scaling: the smallest of
// 1/8, 1/4, 1/2 and 1 that keeps the crop at least outW×outH.
func powerOfTwoScale(cw, ch, outW, outH int) int {
	for _, d := range [...]int{8, 4, 2} {
		if cw/d >= outW && ch/d >= outH {
			return 8 / d
		}
	}
	return 8
}

// TestFidelity measures, for 2,000 RandomResizedCrops to 160×160 of the
// fixture photos, the PSNR of Apply against the reference, a full decode
// cropped and area-resized (which Exact computes): with M/8 scaling (the
// default) and with the power-of-two scales alone. M/8 must stay at or
// above 40 dB on average and 30 dB for every crop; Exact must equal the
// reference byte for byte, and so must M/8 wherever it picks 8/8. With
// -short, 200 crops.
func TestFidelity(t *testing.T) {
	fixtures := loadFixtures(t, 0)
	crops := 2000
	if testing.Short() {
		crops = 200
	}
	per := (crops + len(fixtures) - 1) / len(fixtures)
	op := Op{Kind: RandomResizedCrop, OutW: 160, OutH: 160, FlipProb: 0.5}
	d := newDecoder(t)
	p2 := newDecoder(t)
	p2.scale = powerOfTwoScale
	var m8, pow2 psnrStat
	var byScale [9]psnrStat
	want := make([]byte, 160*160*3)
	got := make([]byte, len(want))
	n := 0
	var r resize.Resizer
	for fi, f := range fixtures {
		pix, stride, w, h := fullDecode(t, f.data)
		for i := 0; i < per && n < crops; i, n = i+1, n+1 {
			seed := uint64(fi*1000 + i)
			x, y, cw, ch, flip := op.Crop(rand.New(rand.NewPCG(seed, 3)), w, h)
			r.Resize(want, 160*3, 160, 160, pix[y*stride+x*3:], stride, cw, ch, flip)

			exact := op
			exact.Exact = true
			if err := d.Apply(f.data, JPEG, w, h, exact, rand.New(rand.NewPCG(seed, 3)), got); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s crop %d,%d %dx%d: Exact differs from full decode + resize", f.name, x, y, cw, ch)
			}

			if err := d.Apply(f.data, JPEG, w, h, op, rand.New(rand.NewPCG(seed, 3)), got); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			m := ChooseScale(cw, ch, 160, 160)
			p := testenv.PSNR(got, want)
			if m == 8 && !bytes.Equal(got, want) {
				t.Errorf("%s crop %d,%d %dx%d: at 8/8 the pixels differ from the reference", f.name, x, y, cw, ch)
			}
			if p < 30 {
				t.Errorf("%s crop %d,%d %dx%d at %d/8: PSNR %.1f dB < 30", f.name, x, y, cw, ch, m, p)
			}
			m8.add(p)
			byScale[m].add(p)

			if err := p2.Apply(f.data, JPEG, w, h, op, rand.New(rand.NewPCG(seed, 3)), got); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			pow2.add(testenv.PSNR(got, want))
		}
	}
	// Crops equal to the reference count as 99 dB in the means; the mean
	// over the scaled crops alone leaves them out.
	var scaled psnrStat
	for m := 1; m < 8; m++ {
		if s := byScale[m]; s.n > 0 {
			scaled.sum += s.sum
			scaled.n += s.n
			if scaled.worst == 0 || s.worst < scaled.worst {
				scaled.worst = s.worst
			}
		}
	}
	if scaled.n > 0 && scaled.sum/float64(scaled.n) < 40 {
		t.Errorf("M/8 scaling: mean PSNR of the scaled crops %.1f dB < 40", scaled.sum/float64(scaled.n))
	}
	t.Logf("%d crops to 160x160 against full decode + area resize (identical crops count as 99 dB):", m8.n)
	t.Logf("  M/8 scaling:         mean %.1f dB, worst %.1f dB; the %d scaled crops alone: mean %.1f dB",
		m8.sum/float64(m8.n), m8.worst, scaled.n, scaled.sum/float64(scaled.n))
	t.Logf("  power-of-two scales: mean %.1f dB, worst %.1f dB", pow2.sum/float64(pow2.n), pow2.worst)
	for m := 1; m <= 8; m++ {
		if s := byScale[m]; s.n > 0 {
			t.Logf("  at %d/8: %4d crops, mean %.1f dB, worst %.1f dB", m, s.n, s.sum/float64(s.n), s.worst)
		}
	}
}

// TestScaledWindowGeometry checks that the window Apply resizes from is
// exactly the crop torchvision's parameters chose, scaled: for random
// images and crops at every scale m/8, the window maps back to (x, y, cw,
// ch) in source pixels, lies inside the decoded region, and the region is
// the crop rounded outward, clamped to the scaled image.
func TestScaledWindowGeometry(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const eps = 1e-9
	for i := 0; i < 20000; i++ {
		w, h := 1+rng.IntN(1000), 1+rng.IntN(1000)
		x, y, cw, ch := RandomResizedCropParams(rng, w, h, DefaultScale, DefaultRatio)
		for m := 1; m <= 8; m++ {
			win := jpeg.ScaledWindow(x, y, cw, ch, w, h, m)
			back := func(v float64) float64 { return v * 8 / float64(m) }
			switch {
			case math.Abs(back(float64(win.X0)+win.FX)-float64(x)) > eps,
				math.Abs(back(float64(win.Y0)+win.FY)-float64(y)) > eps,
				math.Abs(back(win.FW)-float64(cw)) > eps,
				math.Abs(back(win.FH)-float64(ch)) > eps:
				t.Fatalf("%dx%d crop %d,%d %dx%d at %d/8: window %+v does not map back onto the crop", w, h, x, y, cw, ch, m, win)
			case win.FX < 0 || win.FY < 0 || win.FX+win.FW > float64(win.W)+eps || win.FY+win.FH > float64(win.H)+eps:
				t.Fatalf("%dx%d crop %d,%d %dx%d at %d/8: window %+v outside the decoded region", w, h, x, y, cw, ch, m, win)
			case win.X0 != x*m/8 || win.Y0 != y*m/8,
				win.X0+win.W != min(((x+cw)*m+7)/8, (w*m+7)/8),
				win.Y0+win.H != min(((y+ch)*m+7)/8, (h*m+7)/8):
				t.Fatalf("%dx%d crop %d,%d %dx%d at %d/8: region %+v is not the crop rounded outward", w, h, x, y, cw, ch, m, win)
			}
		}
	}
}

// TestScaledCropPixels checks the geometry on pixels: on a smooth image
// whose red channel is the column and green the row, every scale's output
// must read the crop's columns and rows, so the mean error against the
// crop box's values stays well under one pixel's step (a window off by
// one source pixel would be off by 1 on average).
func TestScaledCropPixels(t *testing.T) {
	const w, h = 256, 256
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.RGBA{uint8(x), uint8(y), 128, 255})
		}
	}
	var enc bytes.Buffer
	if err := libjpeg.Encode(&enc, img, &libjpeg.EncoderOptions{Quality: 100}); err != nil {
		t.Fatal(err)
	}
	d := newDecoder(t)
	const out = 40
	rng := rand.New(rand.NewPCG(31, 32))
	dst := make([]byte, out*out*3)
	for i := 0; i < 400; i++ {
		m := 1 + i%8
		d.scale = func(int, int, int, int) int { return m }
		op := Op{Kind: RandomResizedCrop, OutW: out, OutH: out}
		// The crop Apply draws from the same stream.
		seed := rng.Uint64()
		x, y, cw, ch, _ := op.Crop(rand.New(rand.NewPCG(seed, 0)), w, h)
		if err := d.Apply(enc.Bytes(), JPEG, w, h, op, rand.New(rand.NewPCG(seed, 0)), dst); err != nil {
			t.Fatal(err)
		}
		var ex, ey, worst float64
		for oy := 0; oy < out; oy++ {
			for ox := 0; ox < out; ox++ {
				// The mean of the column index over the output pixel's span.
				wantR := float64(x) + (float64(ox)+0.5)*float64(cw)/out - 0.5
				wantG := float64(y) + (float64(oy)+0.5)*float64(ch)/out - 0.5
				dr := float64(dst[(oy*out+ox)*3]) - wantR
				dg := float64(dst[(oy*out+ox)*3+1]) - wantG
				ex += dr
				ey += dg
				worst = max(worst, math.Abs(dr), math.Abs(dg))
			}
		}
		ex /= out * out
		ey /= out * out
		// Single pixels may be off by about a scaled pixel's span where
		// the window's edges clamp; the means may not.
		if math.Abs(ex) > 0.5 || math.Abs(ey) > 0.5 || worst > 2+8/float64(m) {
			t.Errorf("crop %d,%d %dx%d at %d/8: mean error %.2f (columns), %.2f (rows), worst %.1f", x, y, cw, ch, m, ex, ey, worst)
		}
	}
}
