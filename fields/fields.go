// Package fields describes the fields of the batches that ffcvfeed makes,
// each a name, an element type and a shape whose first dimension is the
// batch size. The pipeline that fills batches (package pipeline) and the
// delivery that carries them (package cudafeed) both speak of them, and
// neither needs the other to do so.
package fields

// Spec describes one field of a batch.
type Spec struct {
	Name  string
	DType string // "uint8", "float16", "float32" or "int64"
	Shape []int  // per batch; Shape[0] is the batch size, e.g. [B, H, W, 3]
}
