package decode

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"github.com/ffcvfs/ffcvfs/jpeg"
	"github.com/ffcvfs/ffcvfs/resize"
)

// layoutVariants returns a photo (4:2:0) and its 4:4:4, 4:2:2 and
// grayscale re-encodings (testenv.Layouts).
func layoutVariants(t testing.TB, f fixture) []fixture {
	t.Helper()
	out := []fixture{{f.name + "@420", f.data}}
	for _, l := range testenv.Layouts(t, f.data) {
		if l.Name == "444" || l.Name == "422" || l.Name == "gray" {
			out = append(out, fixture{f.name + "@" + l.Name, l.Data})
		}
	}
	return out
}

// TestPlanesFidelity is the decoded-image tier's pixel bound: for random-
// resized crops to 160×160 of real photos as 4:2:0, 4:4:4, 4:2:2 and
// grayscale JPEGs, ApplyPlanes must give Apply's Exact pixels byte for
// byte (a full decode, cropped and resized) with Op.Exact, and without it
// for every crop Apply decodes at 5/8 or more; and its crops must be at
// least as close to the floating-point reference (a full decode cropped
// and area-resized in float64, resize.Reference) as Apply's default crops
// at m/8 are, on average and at worst, per layout and over the crops made
// at half resolution ("half"). It logs the figures.
func TestPlanesFidelity(t *testing.T) {
	photos := 6
	if testing.Short() {
		photos = 2
	}
	d := newDecoder(t)
	op := Op{Kind: RandomResizedCrop, OutW: 160, OutH: 160}
	exact := op
	exact.Exact = true
	fromPlanes := make([]byte, 160*160*3)
	fromJPEG := make([]byte, len(fromPlanes))
	fromPlanes2 := make([]byte, len(fromPlanes))
	scaled := make([]byte, len(fromPlanes))
	tiers, jpegs := map[string]*psnrStat{}, map[string]*psnrStat{}
	layouts := []string{"420", "444", "422", "gray"}
	for _, l := range append(layouts, "half") {
		tiers[l], jpegs[l] = &psnrStat{}, &psnrStat{}
	}
	for _, photo := range loadFixtures(t, photos) {
		for li, f := range layoutVariants(t, photo) {
			l := layouts[li]
			p, err := d.JPEG().PlanesOf(f.data, jpeg.Size{})
			if err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			planes := make([]byte, p.Bytes())
			if err := d.JPEG().DecodePlanes(f.data, p, planes); err != nil {
				t.Fatalf("%s: %v", f.name, err)
			}
			pix, stride, w, h := fullDecode(t, f.data)
			for i := range 25 {
				seed := uint64(i)
				if err := d.ApplyPlanes(p, planes, op, rand.New(rand.NewPCG(seed, 5)), fromPlanes); err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				if err := d.Apply(f.data, JPEG, w, h, exact, rand.New(rand.NewPCG(seed, 5)), fromJPEG); err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				x, y, cw, ch, _ := op.Crop(rand.New(rand.NewPCG(seed, 5)), w, h)
				half := ChooseScale(cw, ch, 160, 160) <= 4
				if !half && !bytes.Equal(fromPlanes, fromJPEG) {
					t.Fatalf("%s crop %d,%d %dx%d: the planes' pixels differ from the exact JPEG path's", f.name, x, y, cw, ch)
				}
				if err := d.ApplyPlanes(p, planes, exact, rand.New(rand.NewPCG(seed, 5)), fromPlanes2); err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				if !bytes.Equal(fromPlanes2, fromJPEG) {
					t.Fatalf("%s crop %d,%d %dx%d, exact: the planes' pixels differ from the JPEG path's", f.name, x, y, cw, ch)
				}
				if err := d.Apply(f.data, JPEG, w, h, op, rand.New(rand.NewPCG(seed, 5)), scaled); err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				ref := resize.Reference(pix[y*stride+x*3:], stride, cw, ch, 160, 160)
				tp, jp := testenv.PSNR(fromPlanes, ref), testenv.PSNR(scaled, ref)
				tiers[l].add(tp)
				jpegs[l].add(jp)
				if half {
					tiers["half"].add(tp)
					jpegs["half"].add(jp)
				}
			}
		}
	}
	t.Logf("PSNR against a full decode, cropped and area-resized in float64 (160x160; 99 dB: identical):")
	for _, l := range append(layouts, "half") {
		tr, jp := tiers[l], jpegs[l]
		tm, jm := tr.mean(), jp.mean()
		t.Logf("  %-4s %3d crops: from planes mean %.1f dB, worst %.1f dB; JPEG path (m/8) mean %.1f dB, worst %.1f dB",
			l, tr.n, tm, tr.worst, jm, jp.worst)
		if tm < jm || tr.worst < jp.worst {
			t.Errorf("%s: crops from planes (mean %.1f dB, worst %.1f) are farther from the reference than the JPEG path's (mean %.1f, worst %.1f)",
				l, tm, tr.worst, jm, jp.worst)
		}
	}
}
