//go:build !cuda

package cudafeed

import (
	"errors"
	"testing"
)

// TestNewDeviceRingWithoutCUDA: a build without the cuda tag says so.
func TestNewDeviceRingWithoutCUDA(t *testing.T) {
	if CUDASupport {
		t.Fatal("CUDASupport in a build without the cuda tag")
	}
	r := testRing(t, testSpec())
	d, err := NewDeviceRing(r, 0)
	if d != nil || !errors.Is(err, ErrNoCUDA) {
		t.Errorf("NewDeviceRing = %v, %v; want ErrNoCUDA", d, err)
	}
}
