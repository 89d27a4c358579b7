//go:build cuda

package cudafeed

// Lock order: DeviceRing.mu, then nothing.
//
// CUDA contexts are current per OS thread, and goroutines move between
// threads: every method that calls the driver locks its goroutine to its
// thread and makes the device's primary context current first (bind).

import (
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"gorgonia.org/cu"
)

// CUDASupport reports whether this build can deliver to a CUDA device.
const CUDASupport = true

// DeviceRing is the device side of a Ring: the ring's shared memory
// registered as pinned host memory, one device allocation per slot, a
// stream for the copies, and one interprocess event per slot, all exported
// once as IPC handles.
//
// The pinned host memory is the shared-memory ring itself, registered with
// cuMemHostRegister, rather than separate cuMemHostAlloc staging buffers:
// the pipeline writes batches in place either way, but this keeps one host
// copy of each batch instead of two, keeps the Ring the one owner of host
// memory, and keeps the host slots readable by consumers of the CPU
// protocol, so the cuda hello only adds to the CPU one. Registering a
// MAP_SHARED /dev/shm mapping is what NCCL's shared-memory transport does
// too (cudaHostRegister on its /dev/shm segments).
//
// Host slot i is copied into device slot i only: a slot is the producer's
// again once the consumer released it, and by then the consumer has waited
// for its copy; WaitCopied makes sure of it all the same before the host
// slot is written again.
type DeviceRing struct {
	// Immutable after construction.
	ring      *Ring
	ordinal   int
	dev       cu.Device
	ctx       cu.CUContext // the device's primary context, retained
	stream    cu.Stream    // non-blocking: copies do not wait for the legacy default stream
	mem       []cu.DevicePtr
	events    []ipcEvent
	rowBytes  []int // per field: bytes of one row (one sample)
	info      DeviceInfo
	regMem    []byte // the registered host memory; nil if not registered
	ownStream bool

	mu     sync.RWMutex
	closed bool // guarded by mu: Close takes it exclusively, the copies shared
}

var _ DeviceSlots = (*DeviceRing)(nil)

// ErrDeviceClosed is returned by the methods of a DeviceRing after Close.
var ErrDeviceClosed = errors.New("cudafeed: device ring closed")

// NewDeviceRing prepares CUDA device ordinal to receive the batches of r:
// it registers r's shared memory as pinned host memory, allocates
// r.Slots() device slots of r.SlotBytes() bytes (zeroed), creates a stream
// and one interprocess event per slot, and exports IPC handles for all of
// them. Close it before r.
func NewDeviceRing(r *Ring, ordinal int) (_ *DeviceRing, err error) {
	if r.mem == nil {
		return nil, errors.New("cudafeed: NewDeviceRing: the ring is closed")
	}
	name := Device{CUDA: true, Ordinal: ordinal}.String()
	wrap := func(what string, err error) error { return fmt.Errorf("cudafeed: %s: %s: %w", name, what, err) }
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, err := cu.NumDevices()
	if err != nil {
		return nil, wrap("counting devices", err)
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("cudafeed: %s: no such device: this process sees %d CUDA device(s) (CUDA_VISIBLE_DEVICES)", name, n)
	}
	d := &DeviceRing{ring: r, ordinal: ordinal}
	if d.dev, err = cu.GetDevice(ordinal); err != nil {
		return nil, wrap("cuDeviceGet", err)
	}
	if d.ctx, err = d.dev.RetainPrimaryCtx(); err != nil {
		return nil, wrap("retaining the primary context", err)
	}
	defer func() {
		if err != nil {
			d.release()
		}
	}()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return nil, wrap("cuCtxSetCurrent", err)
	}
	uuid, err := d.dev.UUID()
	if err != nil {
		return nil, wrap("cuDeviceGetUuid", err)
	}
	d.info = DeviceInfo{Ordinal: ordinal, UUID: "GPU-" + uuid.String()}
	var pci [3]int
	for i, a := range []cu.DeviceAttribute{cu.PciDomainID, cu.PciBusID, cu.PciDeviceID} {
		if pci[i], err = d.dev.Attribute(a); err != nil {
			return nil, wrap("reading its PCI address", err)
		}
	}
	d.info.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", pci[0], pci[1], pci[2])
	if err := hostRegister(r.mem); err != nil {
		return nil, wrap(fmt.Sprintf("pinning the ring %s (%d bytes)", r.Path(), len(r.mem)), err)
	}
	d.regMem = r.mem
	if d.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return nil, wrap("creating a stream", err)
	}
	d.ownStream = true
	for _, f := range r.Fields() {
		d.rowBytes = append(d.rowBytes, f.Bytes/f.Shape[0])
	}
	for i := 0; i < r.Slots(); i++ {
		p, err := cu.MemAlloc(int64(r.SlotBytes()))
		if err != nil {
			return nil, wrap(fmt.Sprintf("allocating slot %d (%d bytes)", i, r.SlotBytes()), err)
		}
		d.mem = append(d.mem, p)
		if err := cu.MemsetD8(p, 0, int64(r.SlotBytes())); err != nil {
			return nil, wrap(fmt.Sprintf("zeroing slot %d", i), err)
		}
		mh, err := ipcMemHandle(p)
		if err != nil {
			return nil, wrap(fmt.Sprintf("exporting slot %d", i), err)
		}
		ev, err := newIPCEvent()
		if err != nil {
			return nil, wrap(fmt.Sprintf("creating the event of slot %d", i), err)
		}
		d.events = append(d.events, ev)
		eh, err := ev.handle()
		if err != nil {
			return nil, wrap(fmt.Sprintf("exporting the event of slot %d", i), err)
		}
		d.info.MemHandles = append(d.info.MemHandles, hex.EncodeToString(mh[:]))
		d.info.EventHandles = append(d.info.EventHandles, hex.EncodeToString(eh[:]))
	}
	return d, nil
}

// bind locks the calling goroutine to its thread and makes the primary
// context current there; the caller must runtime.UnlockOSThread.
func (d *DeviceRing) bind() error {
	runtime.LockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		return fmt.Errorf("cudafeed: %s: cuCtxSetCurrent: %w", d, err)
	}
	return nil
}

// String returns "cuda:N".
func (d *DeviceRing) String() string { return Device{CUDA: true, Ordinal: d.ordinal}.String() }

// Info implements DeviceSlots.
func (d *DeviceRing) Info() DeviceInfo { return d.info }

// SlotPtr returns the device address of slot i.
func (d *DeviceRing) SlotPtr(i int) cu.DevicePtr { return d.mem[i] }

// CopyToDevice implements DeviceSlots: for every field, one cuMemcpyHtoDAsync
// of the first size rows, on the ring's stream; then the slot's event is
// recorded on it. Nothing allocates.
func (d *DeviceRing) CopyToDevice(slot, size int) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrDeviceClosed
	}
	if slot < 0 || slot >= len(d.mem) || size < 0 || size > d.ring.BatchSize() {
		return fmt.Errorf("cudafeed: %s: CopyToDevice(slot %d, size %d): out of range", d, slot, size)
	}
	defer runtime.UnlockOSThread()
	if err := d.bind(); err != nil {
		return err
	}
	base := slot * d.ring.SlotBytes()
	for f, fi := range d.ring.fields {
		n := size * d.rowBytes[f]
		if n == 0 {
			continue
		}
		src := unsafe.Pointer(&d.ring.mem[base+fi.Offset])
		if err := cu.MemcpyHtoDAsync(d.mem[slot]+cu.DevicePtr(fi.Offset), src, int64(n), d.stream); err != nil {
			return fmt.Errorf("cudafeed: %s: slot %d, field %s: cuMemcpyHtoDAsync(%d bytes): %w", d, slot, fi.Name, n, err)
		}
	}
	if err := d.events[slot].record(d.stream); err != nil {
		return fmt.Errorf("cudafeed: %s: slot %d: %w", d, slot, err)
	}
	return nil
}

// WaitCopied implements DeviceSlots: it synchronizes the slot's event
// (at once when it was never recorded).
func (d *DeviceRing) WaitCopied(slot int) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrDeviceClosed
	}
	if slot < 0 || slot >= len(d.events) {
		return fmt.Errorf("cudafeed: %s: WaitCopied(slot %d): out of range", d, slot)
	}
	defer runtime.UnlockOSThread()
	if err := d.bind(); err != nil {
		return err
	}
	if err := d.events[slot].synchronize(); err != nil {
		return fmt.Errorf("cudafeed: %s: slot %d: %w", d, slot, err)
	}
	return nil
}

// Close waits for the copies in flight, then frees the device slots,
// events and stream, unregisters the host memory and releases the primary
// context. Consumers that still map a device slot keep it alive until they
// close their handle. Call it after the Server's Close and before the
// Ring's.
func (d *DeviceRing) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return d.release()
}

// release frees whatever was created, in reverse order; the calling
// goroutine must be locked to its thread.
func (d *DeviceRing) release() error {
	var errs []error
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		errs = append(errs, fmt.Errorf("cuCtxSetCurrent: %w", err))
	}
	if d.ownStream {
		if err := d.stream.Synchronize(); err != nil {
			errs = append(errs, fmt.Errorf("cuStreamSynchronize: %w", err))
		}
	}
	for _, ev := range d.events {
		if err := ev.destroy(); err != nil {
			errs = append(errs, err)
		}
	}
	d.events = nil
	for _, p := range d.mem {
		if err := cu.MemFree(p); err != nil {
			errs = append(errs, fmt.Errorf("cuMemFree: %w", err))
		}
	}
	d.mem = nil
	if d.ownStream {
		if err := d.stream.Destroy(); err != nil {
			errs = append(errs, fmt.Errorf("cuStreamDestroy: %w", err))
		}
		d.ownStream = false
	}
	if d.regMem != nil {
		if err := hostUnregister(d.regMem); err != nil {
			errs = append(errs, err)
		}
		d.regMem = nil
	}
	if err := d.dev.ReleasePrimaryCtx(); err != nil {
		errs = append(errs, fmt.Errorf("releasing the primary context: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cudafeed: %s: closing: %w", d, err)
	}
	return nil
}
