package decode

import (
	"github.com/ffcvfs/ffcvfs/jpeg"

	"github.com/ffcvfs/ffcvfs/internal/testenv"

	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ffcvfs/ffcvfs/resize"
)

func randomRGB(rng *rand.Rand, w, h int) []byte {
	b := make([]byte, w*h*3)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func TestApplyRawEqualsCropResize(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 10))
	const w, h = 120, 90
	src := randomRGB(rng, w, h)
	d := newDecoder(t)
	for _, op := range []Op{
		{Kind: RandomResizedCrop, OutW: 32, OutH: 32},
		{Kind: RandomResizedCrop, OutW: 160, OutH: 128, FlipProb: 0.5},
		{Kind: CenterCrop, OutW: 40, OutH: 40},
	} {
		for seed := range uint64(10) {
			dst := make([]byte, op.OutW*op.OutH*3)
			if err := d.Apply(src, Raw, w, h, op, rand.New(rand.NewPCG(seed, 0)), dst); err != nil {
				t.Fatal(err)
			}
			x, y, cw, ch, flip := op.Crop(rand.New(rand.NewPCG(seed, 0)), w, h)
			crop := make([]byte, cw*ch*3)
			for yy := 0; yy < ch; yy++ {
				copy(crop[yy*cw*3:], src[(y+yy)*w*3+x*3:(y+yy)*w*3+(x+cw)*3])
			}
			want := resize.Reference(crop, cw*3, cw, ch, op.OutW, op.OutH)
			if flip {
				want = mirror(want, op.OutW, op.OutH)
			}
			for i := range dst {
				if dd := int(dst[i]) - int(want[i]); dd < -1 || dd > 1 {
					t.Fatalf("%+v seed %d: byte %d = %d, want %d", op, seed, i, dst[i], want[i])
				}
			}
		}
	}
}

func mirror(p []byte, w, h int) []byte {
	out := make([]byte, len(p))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			copy(out[(y*w+x)*3:(y*w+x)*3+3], p[(y*w+w-1-x)*3:(y*w+w-1-x)*3+3])
		}
	}
	return out
}

func TestFlip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	const w, h = 64, 48
	src := randomRGB(rng, w, h)
	d := newDecoder(t)
	op := Op{Kind: CenterCrop, OutW: 30, OutH: 30}
	plain := make([]byte, 30*30*3)
	flipped := make([]byte, 30*30*3)
	if err := d.Apply(src, Raw, w, h, op, nil, plain); err != nil {
		t.Fatal(err)
	}
	op.FlipProb = 1
	if err := d.Apply(src, Raw, w, h, op, nil, flipped); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mirror(plain, 30, 30), flipped) {
		t.Error("FlipProb 1 does not mirror the image")
	}
	// With FlipProb 0.5 about half the draws flip.
	op.FlipProb = 0.5
	n := 0
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		if _, _, _, _, f := op.Crop(r, w, h); f {
			n++
		}
	}
	if n < 430 || n > 570 {
		t.Errorf("%d of 1000 flipped at FlipProb 0.5", n)
	}
}

// TestApplyJPEG checks that Apply on a JPEG, which decodes at a reduced DCT
// scale, stays close to the same crop and resize of the full decode. The
// two differ by the DCT-domain downscale, which is not an area average:
// about 44 dB on average, down to about 28 dB on detailed photos.
func TestApplyJPEG(t *testing.T) {
	d := newDecoder(t)
	var worst, sum float64 = math.Inf(1), 0
	n := 0
	for i, f := range loadFixtures(t, 20) {
		pix, stride, w, h := fullDecode(t, f.data)
		for _, op := range []Op{
			{Kind: RandomResizedCrop, OutW: 64, OutH: 64, FlipProb: 0.5},
			{Kind: CenterCrop, OutW: 56, OutH: 56},
		} {
			dst := make([]byte, op.OutW*op.OutH*3)
			if err := d.Apply(f.data, JPEG, 0, 0, op, rand.New(rand.NewPCG(uint64(i), 1)), dst); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			x, y, cw, ch, flip := op.Crop(rand.New(rand.NewPCG(uint64(i), 1)), w, h)
			want := make([]byte, len(dst))
			var r resize.Resizer
			r.Resize(want, op.OutW*3, op.OutW, op.OutH, pix[y*stride+x*3:], stride, cw, ch, flip)
			p := testenv.PSNR(dst, want)
			worst = min(worst, p)
			sum += p
			n++
			if p < 25 {
				t.Errorf("%s %+v: PSNR %.1f dB against full decode", f.name, op, p)
			}
		}
	}
	if sum/float64(n) < 38 {
		t.Errorf("mean PSNR %.1f dB < 38", sum/float64(n))
	}
	t.Logf("Apply(JPEG) vs full decode + crop + resize: PSNR mean %.1f dB, min %.1f dB over %d", sum/float64(n), worst, n)
}

// TestApplyRestartIntervals: a JPEG with restart intervals, its size given
// as a beton's metadata gives it, is decoded from the intervals around
// each crop (whose own JPEG has a frame of its own size) to the pixels of
// the same crop of the JPEG without them, for every crop kind and scale
// rule.
func TestApplyRestartIntervals(t *testing.T) {
	d := newDecoder(t)
	for i, f := range loadFixtures(t, 10) {
		rst, _, err := jpeg.AddRestarts(f.data, 4)
		if err != nil {
			t.Fatal(err)
		}
		w, h, err := jpeg.Header(f.data)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range []Op{
			{Kind: RandomResizedCrop, OutW: 64, OutH: 64, FlipProb: 0.5},
			{Kind: RandomResizedCrop, OutW: 64, OutH: 64, Exact: true},
			{Kind: CenterCrop, OutW: 56, OutH: 56},
		} {
			want := make([]byte, op.OutW*op.OutH*3)
			got := make([]byte, len(want))
			if err := d.Apply(f.data, JPEG, w, h, op, rand.New(rand.NewPCG(uint64(i), 1)), want); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			if err := d.Apply(rst, JPEG, w, h, op, rand.New(rand.NewPCG(uint64(i), 1)), got); err != nil {
				t.Fatalf("%s with restart intervals, %+v: %v", f.name, op, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s %+v: the crop from restart intervals differs from the whole JPEG's", f.name, op)
			}
		}
	}
}

func TestApplyErrors(t *testing.T) {
	d := newDecoder(t)
	dst := make([]byte, 16*16*3)
	op := Op{Kind: CenterCrop, OutW: 16, OutH: 16}
	if err := d.Apply([]byte("nope"), JPEG, 0, 0, op, nil, dst); err == nil {
		t.Error("garbage JPEG: no error")
	}
	if err := d.Apply(make([]byte, 10), Raw, 10, 10, op, nil, dst); err == nil {
		t.Error("short raw: no error")
	}
	if err := d.Apply(make([]byte, 300), Raw, 10, 10, op, nil, dst[:10]); err == nil {
		t.Error("short dst: no error")
	}
}
