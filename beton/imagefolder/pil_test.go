package imagefolder

import (
	"bytes"
	"encoding/json"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"golang.org/x/image/bmp"
	"golang.org/x/image/tiff"
)

// pilScript writes test images of every format and mode PIL saves into the
// directory argv[1], then, for every file there (those written beforehand
// too), what np.asarray(Image.open(f).convert("RGB")) gives: NAME.rgb and an
// entry in expect.json, or the error PIL raised.
const pilScript = `
import io, json, os, sys
import numpy as np
from PIL import Image

d = sys.argv[1]
rng = np.random.default_rng(1)
W, H = 37, 23
yy, xx = np.mgrid[0:H, 0:W]
smooth = np.stack([xx * 6, yy * 10, (xx + yy) * 4], axis=-1).astype(np.uint8)
noisy = (smooth.astype(int) + rng.integers(-40, 40, smooth.shape)).clip(0, 255).astype(np.uint8)
alpha = rng.integers(0, 256, (H, W), dtype=np.uint8)

rgb = Image.fromarray(noisy, "RGB")
rgba = Image.fromarray(np.dstack([noisy, alpha]), "RGBA")
gray = rgb.convert("L")
la = Image.merge("LA", [gray, Image.fromarray(alpha, "L")])
bits = gray.point(lambda v: 255 if v > 100 else 0).convert("1")
pal = rgb.quantize(colors=50)
pal.info["transparency"] = 3
pal16 = rgb.quantize(colors=16)
i16 = Image.fromarray((xx * 1000 + yy * 7).astype(np.uint16))
cmyk = Image.fromarray(np.dstack([noisy, alpha]), "CMYK")

def save(name, im, fmt, **kw):
    im.save(os.path.join(d, name), fmt, **kw)

save("rgb420.jpg", rgb, "JPEG", quality=90)
save("rgb444.jpg", rgb, "JPEG", quality=95, subsampling=0)
save("rgb422.jpg", rgb, "JPEG", quality=80, subsampling=1)
save("progressive.jpg", rgb, "JPEG", quality=85, progressive=True)
save("optimized.jpg", rgb, "JPEG", quality=85, optimize=True)
save("gray.jpg", gray, "JPEG")
save("cmyk.jpg", cmyk, "JPEG", quality=95)
b = io.BytesIO(); cmyk.save(b, "JPEG", quality=95); b = b.getvalue()
assert b[2:4] == b"\xff\xee"
n = int.from_bytes(b[4:6], "big")
open(os.path.join(d, "cmyk-no-adobe.jpg"), "wb").write(b[:2] + b[4 + n:])
for name, im in [("rgb", rgb), ("rgba", rgba), ("gray", gray), ("la", la), ("bits", bits),
                 ("pal", pal), ("pal16", pal16), ("i16", i16)]:
    save(name + ".png", im, "PNG")
for name, im in [("rgb", rgb), ("gray", gray), ("pal", pal), ("bits", bits), ("rgba", rgba)]:
    save(name + ".bmp", im, "BMP")
for name, im in [("rgb", rgb), ("gray", gray), ("pal", pal), ("bits", bits), ("rgba", rgba),
                 ("i16", i16), ("cmyk", cmyk)]:
    save(name + ".tif", im, "TIFF")
save("rgb-lzw.tif", rgb, "TIFF", compression="tiff_lzw")
save("rgb-deflate.tif", rgb, "TIFF", compression="tiff_adobe_deflate")
save("lossless.webp", rgb, "WEBP", lossless=True)
save("lossless-alpha.webp", rgba, "WEBP", lossless=True)
save("lossy.webp", rgb, "WEBP", quality=90)
save("lossy-even.webp", rgb.crop((0, 0, 36, 22)), "WEBP", quality=70)
save("lossy-alpha.webp", rgba, "WEBP", quality=90)
save("rgb.ppm", rgb, "PPM")
save("gray.pgm", gray, "PPM")
save("bits.pbm", bits, "PPM")

expect = {}
for name in sorted(os.listdir(d)):
    if name.endswith(".rgb") or name.endswith(".json"):
        continue
    try:
        with Image.open(os.path.join(d, name)) as im:
            a = np.ascontiguousarray(np.asarray(im.convert("RGB")))
    except Exception as e:
        expect[name] = {"error": repr(e)}
        continue
    a.tofile(os.path.join(d, name + ".rgb"))
    expect[name] = {"width": a.shape[1], "height": a.shape[0]}
json.dump(expect, open(os.path.join(d, "expect.json"), "w"))
`

// TestDecodeMatchesPIL checks that raw pixels equal PIL's convert("RGB") for
// files PIL (and Go) write in every supported format and color model. It
// runs when /usr/bin/python3 has PIL and numpy.
func TestDecodeMatchesPIL(t *testing.T) {
	if exec.Command("/usr/bin/python3", "-c", "import PIL, numpy").Run() != nil {
		testenv.Missing(t, "/usr/bin/python3 cannot import PIL and numpy (apt-get install python3-pil python3-numpy)")
	}
	dir := t.TempDir()
	writeGoImages(t, dir)
	cmd := exec.Command("/usr/bin/python3", "-c", pilScript, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("python: %v\n%s", err, out)
	}
	var expect map[string]struct {
		Width, Height int
		Error         string
	}
	if err := json.Unmarshal(readFile(t, filepath.Join(dir, "expect.json")), &expect); err != nil {
		t.Fatal(err)
	}
	// CMYK JPEGs are decoded by Go's image/jpeg, whose IDCT rounds
	// differently from libjpeg's.
	approx := map[string]bool{"cmyk.jpg": true, "cmyk-no-adobe.jpg": true}
	// Files PIL reads and Prepare refuses: golang.org/x/image/tiff has no
	// CMYK.
	unsupported := map[string]bool{"cmyk.tif": true}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range expect {
			if !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		e := expect[name]
		src := readFile(t, filepath.Join(dir, name))
		p, err := Prepare(name, src, Options{Mode: WriteRaw}, nil, nil)
		switch {
		case e.Error != "":
			if err == nil {
				t.Errorf("%s: PIL fails (%s), Prepare does not", name, e.Error)
			}
			continue
		case unsupported[name]:
			if err == nil {
				t.Errorf("%s: expected to be unsupported, but Prepare decoded it; update the test", name)
			}
			continue
		case err != nil:
			t.Errorf("%s: %v", name, err)
			continue
		case p.Width != e.Width || p.Height != e.Height:
			t.Errorf("%s: %dx%d, PIL %dx%d", name, p.Width, p.Height, e.Width, e.Height)
			continue
		}
		want := readFile(t, filepath.Join(dir, name+".rgb"))
		if approx[name] {
			var sum, worst int
			for i := range want {
				d := absDiff(want[i], p.Data[i])
				sum += d
				worst = max(worst, d)
			}
			t.Logf("%s: mean %.3f max %d", name, float64(sum)/float64(len(want)), worst)
			if mean := float64(sum) / float64(len(want)); mean > 0.5 || worst > 3 {
				t.Errorf("%s: differs from PIL by %.2f on average, at most %d", name, mean, worst)
			}
			continue
		}
		if !bytes.Equal(p.Data, want) {
			i := 0
			for i < len(want) && want[i] == p.Data[i] {
				i++
			}
			t.Errorf("%s: pixels differ from PIL's, first at byte %d: got %d, PIL %d", name, i, p.Data[i], want[i])
		}
	}
	t.Logf("compared %d files with PIL", len(names))
}

// writeGoImages writes the files PIL cannot write: 16-bit color PNGs, TIFFs
// of other layouts, plain and 16-bit PNM.
func writeGoImages(t *testing.T, dir string) {
	t.Helper()
	const w, h = 19, 11
	rgba64 := image.NewRGBA64(image.Rect(0, 0, w, h))
	nrgba64 := image.NewNRGBA64(image.Rect(0, 0, w, h))
	nrgba := image.NewNRGBA(image.Rect(0, 0, w, h))
	gray16 := image.NewGray16(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			v := uint16(x*3001 + y*977)
			rgba64.SetRGBA64(x, y, color.RGBA64{v, v ^ 0x5555, v / 3, 0xFFFF})
			nrgba64.SetNRGBA64(x, y, color.NRGBA64{v, v ^ 0x5555, v / 3, v ^ 0xAAAA})
			nrgba.SetNRGBA(x, y, color.NRGBA{byte(v), byte(v >> 8), byte(x * 9), byte(y * 20)})
			gray16.SetGray16(x, y, color.Gray16{v / 97})
		}
	}
	write := func(name string, b []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	encode := func(name string, f func(*bytes.Buffer) error) {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			t.Fatal(err)
		}
		write(name, b.Bytes())
	}
	encode("go-rgb16.png", func(b *bytes.Buffer) error { return png.Encode(b, rgba64) })
	encode("go-rgba16.png", func(b *bytes.Buffer) error { return png.Encode(b, nrgba64) })
	encode("go-gray16.png", func(b *bytes.Buffer) error { return png.Encode(b, gray16) })
	encode("go-nrgba.bmp", func(b *bytes.Buffer) error { return bmp.Encode(b, nrgba) })
	encode("go-nrgba.tif", func(b *bytes.Buffer) error { return tiff.Encode(b, nrgba, nil) })
	encode("go-rgb16.tif", func(b *bytes.Buffer) error { return tiff.Encode(b, rgba64, nil) })
	encode("go-gray16.tif", func(b *bytes.Buffer) error { return tiff.Encode(b, gray16, nil) })
	encode("go-deflate.tif", func(b *bytes.Buffer) error {
		return tiff.Encode(b, nrgba, &tiff.Options{Compression: tiff.Deflate, Predictor: true})
	})

	var p3, p2 strings.Builder
	p3.WriteString("P3\n# plain\n5 3\n1000\n")
	p2.WriteString("P2 5 3 7\n")
	var p6, p5 bytes.Buffer
	p6.WriteString("P6 5 3 40000\n")
	p5.WriteString("P5 5 3 300\n")
	for i := 0; i < 15; i++ {
		for c := 0; c < 3; c++ {
			v := (i*67 + c*301) % 1001
			p3.WriteString(" " + strconv.Itoa(v))
			big := (i*4099 + c*7001) % 40001
			p6.Write([]byte{byte(big >> 8), byte(big)})
		}
		p2.WriteString(" " + strconv.Itoa(i%8))
		g := i * 21
		p5.Write([]byte{byte(g >> 8), byte(g)})
	}
	write("plain.ppm", []byte(p3.String()))
	write("plain.pgm", []byte(p2.String()))
	write("wide.ppm", p6.Bytes())
	write("wide.pgm", p5.Bytes())
}
