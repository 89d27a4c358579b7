package decode

import (
	"math"
	"math/rand/v2"
)

// Default parameters of RandomResizedCrop (torchvision's and FFCV's) and of
// FFCV's center crop.
var (
	DefaultScale = [2]float64{0.08, 1}
	DefaultRatio = [2]float64{3.0 / 4.0, 4.0 / 3.0}
)

// DefaultCenterRatio is FFCV's DEFAULT_CROP_RATIO, 224/256.
const DefaultCenterRatio = 224.0 / 256.0

// RandomResizedCropParams picks a crop of a w×h image the way torchvision's
// RandomResizedCrop.get_params does: up to 10 attempts draw an area
// fraction uniformly from scale and an aspect ratio log-uniformly from
// ratio, round the sides half to even (Python's round), and accept the
// first crop that fits, placing it uniformly; otherwise the crop is the
// whole image trimmed to the nearest ratio bound, centered.
func RandomResizedCropParams(rng *rand.Rand, w, h int, scale [2]float64, ratio [2]float64) (x, y, cw, ch int) {
	area := float64(w * h)
	logLo, logHi := math.Log(ratio[0]), math.Log(ratio[1])
	for range 10 {
		target := area * (scale[0] + rng.Float64()*(scale[1]-scale[0]))
		ar := math.Exp(logLo + rng.Float64()*(logHi-logLo))
		cw := int(math.RoundToEven(math.Sqrt(target * ar)))
		ch := int(math.RoundToEven(math.Sqrt(target / ar)))
		if 0 < cw && cw <= w && 0 < ch && ch <= h {
			y := rng.IntN(h - ch + 1)
			x := rng.IntN(w - cw + 1)
			return x, y, cw, ch
		}
	}
	inRatio := float64(w) / float64(h)
	lo, hi := min(ratio[0], ratio[1]), max(ratio[0], ratio[1])
	switch {
	case inRatio < lo:
		cw = w
		ch = roundClamped(float64(cw)/lo, h)
	case inRatio > hi:
		ch = h
		cw = roundClamped(float64(ch)*hi, w)
	default:
		cw, ch = w, h
	}
	return (w - cw) / 2, (h - ch) / 2, cw, ch
}

// roundClamped rounds v half to even and clamps it to [1, limit]: a crop
// keeps at least a pixel, and no more than the image, whatever the ratio
// (torchvision's fallback can round to 0 for ratios far from the image's).
func roundClamped(v float64, limit int) int {
	if !(v >= 1) { // NaN too
		return 1
	}
	if v >= float64(limit) {
		return limit
	}
	return int(math.RoundToEven(v))
}

// CenterCropParams returns FFCV's validation crop (CenterCropRGBImageDecoder):
// a square of side int(ratio·min(w, h)), centered.
func CenterCropParams(w, h int, ratio float64) (x, y, cw, ch int) {
	s := int(ratio * float64(min(w, h)))
	s = max(1, min(s, min(w, h)))
	return (w - s) / 2, (h - s) / 2, s, s
}

// ChooseScale returns the smallest DCT scale m/8 (1 ≤ m ≤ 8) at which a
// cw×ch crop keeps at least outW×outH pixels: m·cw/8 ≥ outW and
// m·ch/8 ≥ outH. The resize after decoding then only ever shrinks the
// crop, or enlarges it exactly as at full resolution (m = 8), and decodes
// as few pixels as that allows.
func ChooseScale(cw, ch, outW, outH int) int {
	if cw <= 0 || ch <= 0 {
		return 8
	}
	m := max((8*outW+cw-1)/cw, (8*outH+ch-1)/ch)
	return min(max(m, 1), 8)
}
