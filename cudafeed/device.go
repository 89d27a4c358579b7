package cudafeed

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNoCUDA is returned by NewDeviceRing in a build without the cuda tag.
var ErrNoCUDA = errors.New("built without CUDA support (rebuild with -tags cuda)")

// IPCHandleSize is the size in bytes of a CUDA IPC handle (CU_IPC_HANDLE_SIZE),
// for memory and for events alike. The protocol sends handles as lowercase
// hex, twice as many characters.
const IPCHandleSize = 64

// Device is where a server delivers batches: the host (the shared-memory
// ring only) or a CUDA device (the ring, then device memory).
type Device struct {
	CUDA    bool
	Ordinal int // CUDA device ordinal, in this process's numbering; 0 for the host
}

// String returns "cpu" or "cuda:N", the form ParseDevice reads.
func (d Device) String() string {
	if !d.CUDA {
		return "cpu"
	}
	return "cuda:" + strconv.Itoa(d.Ordinal)
}

// ParseDevice reads "cpu", "cuda" (device 0) or "cuda:N" (N ≥ 0). It does
// not check that the device exists or that this build supports CUDA (see
// CUDASupport).
func ParseDevice(s string) (Device, error) {
	switch s {
	case "cpu":
		return Device{}, nil
	case "cuda":
		return Device{CUDA: true}, nil
	}
	rest, ok := strings.CutPrefix(s, "cuda:")
	if !ok {
		return Device{}, fmt.Errorf("device %q: want cpu, cuda or cuda:N", s)
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strings.TrimSpace(rest) != rest || strings.HasPrefix(rest, "+") {
		return Device{}, fmt.Errorf("device %q: %q is not a device number (want cuda:N, N ≥ 0)", s, rest)
	}
	return Device{CUDA: true, Ordinal: n}, nil
}

// DeviceInfo describes the device side of a ring to a consumer. The hello
// carries it as its "cuda" object (all but EventHandles); each batch
// message carries the event handle of its slot.
type DeviceInfo struct {
	// Ordinal is the device in the producer's numbering (its
	// CUDA_VISIBLE_DEVICES); a consumer should find its device by UUID.
	Ordinal int `json:"device"`
	// UUID is the device's UUID as nvidia-smi prints it: "GPU-xxxxxxxx-…".
	UUID string `json:"device_uuid"`
	// PCIBusID is the device's PCI address, "DDDD:BB:DD.0" (hex), for
	// consumers that cannot read UUIDs.
	PCIBusID string `json:"pci_bus_id"`
	// MemHandles[i] is the IPC handle (hex) of slot i's device allocation,
	// SlotBytes long; field f lies at the same offset as in the shm slot.
	MemHandles []string `json:"mem_handles"`
	// EventHandles[i] is the IPC handle (hex) of the event recorded after
	// the copies into slot i; sent in each batch message, not in the hello.
	EventHandles []string `json:"-"`
}

// validate checks the handle lists against a ring of slots slots.
func (di DeviceInfo) validate(slots int) error {
	if len(di.MemHandles) != slots || len(di.EventHandles) != slots {
		return fmt.Errorf("cudafeed: device info has %d memory and %d event handles for %d slots",
			len(di.MemHandles), len(di.EventHandles), slots)
	}
	for i := 0; i < slots; i++ {
		for _, h := range []string{di.MemHandles[i], di.EventHandles[i]} {
			if b, err := hex.DecodeString(h); err != nil || len(b) != IPCHandleSize || strings.ToLower(h) != h {
				return fmt.Errorf("cudafeed: slot %d: handle %.20q… is not %d bytes of lowercase hex", i, h, IPCHandleSize)
			}
		}
	}
	return nil
}

// DeviceSlots is the device side of a ring, which a Server drives when
// Options.Device is set. *DeviceRing implements it in builds with the cuda
// tag.
//
// The Server calls CopyToDevice from Publish (in publish order, before the
// batch is announced) and WaitCopied from AcquireSlot (before the producer
// may write the slot's host memory again). Both may be called concurrently,
// for different slots.
type DeviceSlots interface {
	// Info returns the handles announced to consumers; constant.
	Info() DeviceInfo
	// CopyToDevice enqueues asynchronous copies of the first size rows of
	// every field of host slot slot into device slot slot, then records
	// the slot's event after them. It does not wait for the copies.
	CopyToDevice(slot, size int) error
	// WaitCopied blocks until the copies last enqueued out of host slot
	// slot are done.
	WaitCopied(slot int) error
}
