package imagefolder

// ResizedSize is the reference writer's rule for the stored size of a w×h
// image: unchanged when maxResolution is 0 or the longer side fits, else both
// sides scaled by maxResolution/max(w, h) and truncated, in float64 as numpy
// computes them. resized reports whether the size changed. A side can
// truncate to 0 for a very elongated image; Prepare rejects that.
func ResizedSize(w, h, maxResolution int) (nw, nh int, resized bool) {
	if maxResolution <= 0 {
		return w, h, false
	}
	ratio := float64(maxResolution) / float64(max(w, h))
	if ratio >= 1 {
		return w, h, false
	}
	return int(ratio * float64(w)), int(ratio * float64(h)), true
}

// grow returns b resized to n elements, reusing its storage when it can.
func grow[T any](b []T, n int) []T {
	if cap(b) >= n {
		return b[:n]
	}
	return make([]T, n, n+n/4)
}
