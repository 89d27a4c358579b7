package pipeline

import "fmt"

// DType is the element type of a batch's images.
type DType string

// The dtypes a pipeline writes.
const (
	Uint8   DType = "uint8"
	Float16 DType = "float16"
	Float32 DType = "float32"
)

// DimOrder is the order of a batch's image dimensions.
type DimOrder string

// The dimension orders a pipeline writes.
const (
	NHWC DimOrder = "nhwc"
	NCHW DimOrder = "nchw"
)

// OnError says what a pipeline does with a sample that cannot be decoded.
type OnError string

// The ways to handle a bad sample.
const (
	// Skip replaces the sample by another of its batch and counts it.
	Skip OnError = "skip"
	// Fail ends the epoch with the error.
	Fail OnError = "fail"
)

// ParseDType reads a dtype name: uint8, float16 or float32.
func ParseDType(s string) (DType, error) {
	switch d := DType(s); d {
	case Uint8, Float16, Float32:
		return d, nil
	}
	return "", fmt.Errorf("dtype %q: want uint8, float16 or float32", s)
}

// ParseDimOrder reads a dimension order: nhwc or nchw.
func ParseDimOrder(s string) (DimOrder, error) {
	switch l := DimOrder(s); l {
	case NHWC, NCHW:
		return l, nil
	}
	return "", fmt.Errorf("layout %q: want nhwc or nchw", s)
}

// ParseOnError reads a way to handle a bad sample: skip or fail.
func ParseOnError(s string) (OnError, error) {
	switch e := OnError(s); e {
	case Skip, Fail:
		return e, nil
	}
	return "", fmt.Errorf("on-error %q: want skip or fail", s)
}
