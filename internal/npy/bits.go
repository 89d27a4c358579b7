package npy

import (
	"math"

	"github.com/ffcvfs/ffcvfs/internal/half"
)

func float32frombits(b uint32) float32 { return math.Float32frombits(b) }
func float64frombits(b uint64) float64 { return math.Float64frombits(b) }
func halfValue(h uint16) float32       { return half.Value(h) }
