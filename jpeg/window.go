package jpeg

// Window says what a region decode at a scale m/8 gives for a crop, and
// where the crop lies in it: the region of the scaled image that
// DecodeRegion returns (X0, Y0, W×H, in scaled pixels), and inside it the
// crop itself, which starts at (FX, FY) and spans FW×FH scaled pixels.
// Source pixel c maps to scaled pixel c·m/8, so the window is exactly the
// crop, scaled.
type Window struct {
	X0, Y0, W, H   int
	FX, FY, FW, FH float64
}

// ScaledWindow is the window of the crop (x, y, cw, ch) of a w×h image
// decoded at scale m/8, with the region rounded outward and clamped to the
// scaled image as DecodeRegion does.
func ScaledWindow(x, y, cw, ch, w, h, m int) Window {
	x0, y0 := x*m/8, y*m/8
	x1 := min(((x+cw)*m+7)/8, (w*m+7)/8)
	y1 := min(((y+ch)*m+7)/8, (h*m+7)/8)
	f := float64(m) / 8
	return Window{
		X0: x0, Y0: y0, W: x1 - x0, H: y1 - y0,
		FX: float64(x)*f - float64(x0), FY: float64(y)*f - float64(y0),
		FW: float64(cw) * f, FH: float64(ch) * f,
	}
}
