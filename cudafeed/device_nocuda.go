//go:build !cuda

package cudafeed

// This build has no GPU delivery path: gorgonia.org/cu exits the process
// from its init when no NVIDIA driver is present, so it is linked only
// into builds with the cuda tag (cuda.go, cuda_shim.go).

import "fmt"

// CUDASupport reports whether this build can deliver to a CUDA device.
const CUDASupport = false

// DeviceRing is the device side of a Ring. Without the cuda tag it cannot
// be created: NewDeviceRing returns ErrNoCUDA.
type DeviceRing struct{}

var _ DeviceSlots = (*DeviceRing)(nil)

// NewDeviceRing returns ErrNoCUDA in this build.
func NewDeviceRing(r *Ring, ordinal int) (*DeviceRing, error) {
	return nil, fmt.Errorf("cudafeed: %s: %w", Device{CUDA: true, Ordinal: ordinal}, ErrNoCUDA)
}

// Info implements DeviceSlots.
func (d *DeviceRing) Info() DeviceInfo { return DeviceInfo{} }

// CopyToDevice implements DeviceSlots; it always fails in this build.
func (d *DeviceRing) CopyToDevice(slot, size int) error { return ErrNoCUDA }

// WaitCopied implements DeviceSlots; it always fails in this build.
func (d *DeviceRing) WaitCopied(slot int) error { return ErrNoCUDA }

// Close does nothing in this build.
func (d *DeviceRing) Close() error { return nil }
