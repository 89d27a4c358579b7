package half

import (
	"math"
	"testing"
)

func TestBits(t *testing.T) {
	for _, c := range []struct {
		f    float32
		want uint16
	}{{0, 0}, {1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {0.1, 0x2e66}, {6e-8, 0x0001}, {float32(math.Inf(-1)), 0xfc00}} {
		if got := Bits(c.f); got != c.want {
			t.Errorf("Bits(%v) = %#04x, want %#04x", c.f, got, c.want)
		}
	}
}

// TestRoundTrip: every half that is not a NaN converts to a float32 and
// back to itself.
func TestRoundTrip(t *testing.T) {
	for h := range 1 << 16 {
		v := Value(uint16(h))
		if v != v {
			if h&0x7c00 != 0x7c00 || h&0x3ff == 0 {
				t.Fatalf("Value(%#04x) is NaN", h)
			}
			continue
		}
		if got := Bits(v); got != uint16(h) {
			t.Fatalf("Bits(Value(%#04x) = %v) = %#04x", h, v, got)
		}
	}
}
