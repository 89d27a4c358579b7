package cudafeed

import (
	"context"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
)

func TestParseDevice(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Device
		ok   bool
	}{
		{"cpu", Device{}, true},
		{"cuda", Device{CUDA: true}, true},
		{"cuda:0", Device{CUDA: true}, true},
		{"cuda:12", Device{CUDA: true, Ordinal: 12}, true},
		{"cuda:x", Device{}, false},
		{"cuda:", Device{}, false},
		{"cuda:-1", Device{}, false},
		{"cuda:+1", Device{}, false},
		{"cuda: 1", Device{}, false},
		{"cuda:1.5", Device{}, false},
		{"CUDA:0", Device{}, false},
		{"gpu", Device{}, false},
		{"", Device{}, false},
	} {
		got, err := ParseDevice(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseDevice(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if back, err2 := ParseDevice(got.String()); err == nil && (err2 != nil || back != got) {
			t.Errorf("ParseDevice(%q).String() = %q, which reads back as %+v, %v", tc.in, got.String(), back, err2)
		}
	}
	if s := (Device{}).String(); s != "cpu" {
		t.Errorf("Device{}.String() = %q", s)
	}
	if s := (Device{CUDA: true, Ordinal: 2}).String(); s != "cuda:2" {
		t.Errorf("cuda:2 String() = %q", s)
	}
}

// fakeDevice records the calls a Server makes to its DeviceSlots.
type fakeDevice struct {
	info DeviceInfo

	mu      sync.Mutex
	calls   []string
	failErr error
}

func newFakeDevice(slots int) *fakeDevice {
	d := &fakeDevice{}
	d.info.Ordinal, d.info.UUID, d.info.PCIBusID = 0, "GPU-00000000-1111-2222-3333-444444444444", "0000:65:00.0"
	for i := 0; i < slots; i++ {
		m, e := make([]byte, IPCHandleSize), make([]byte, IPCHandleSize)
		m[0], e[0], e[63] = byte(i), byte(0x80+i), 0xee
		d.info.MemHandles = append(d.info.MemHandles, hex.EncodeToString(m))
		d.info.EventHandles = append(d.info.EventHandles, hex.EncodeToString(e))
	}
	return d
}

func (d *fakeDevice) Info() DeviceInfo { return d.info }

func (d *fakeDevice) CopyToDevice(slot, size int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, "copy "+itoa(slot)+" "+itoa(size))
	return d.failErr
}

func (d *fakeDevice) WaitCopied(slot int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.calls = append(d.calls, "wait "+itoa(slot))
	return d.failErr
}

func (d *fakeDevice) takeCalls() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := strings.Join(d.calls, ", ")
	d.calls = nil
	return s
}

func deviceServer(t *testing.T, dev DeviceSlots) (*Ring, *Server) {
	t.Helper()
	l := testSpec()
	l.Slots = 2
	r := testRing(t, l)
	s, err := NewServer(r, Options{
		SocketPath:      testenv.Socket(t, "feed.sock"),
		BatchesPerEpoch: 2, Epochs: 1, Device: dev,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return r, s
}

// TestServerDevice: with a Device, the hello carries "cuda" (device, UUID,
// one memory handle per slot), each batch message the event handle of its
// slot; Publish copies before announcing, AcquireSlot waits for the slot's
// last copy.
func TestServerDevice(t *testing.T) {
	dev := newFakeDevice(2)
	r, s := deviceServer(t, dev)
	c := dial(t, s)
	h := c.read()
	if h["shm"] != r.Path() || num(h, "slots") != 2 {
		t.Errorf("hello %v: the host fields of the CPU protocol must stay", h)
	}
	cu, ok := h["cuda"].(map[string]any)
	if !ok {
		t.Fatalf("hello without a cuda object: %v", h)
	}
	mh, _ := cu["mem_handles"].([]any)
	if num(cu, "device") != 0 || cu["device_uuid"] != dev.info.UUID || cu["pci_bus_id"] != dev.info.PCIBusID || len(mh) != 2 ||
		mh[0] != dev.info.MemHandles[0] || mh[1] != dev.info.MemHandles[1] {
		t.Errorf("hello cuda %v, want %+v", cu, dev.info)
	}
	if _, ok := cu["event_handles"]; ok {
		t.Errorf("hello cuda %v: event handles go with each batch", cu)
	}

	a := acquire(t, s)
	if got := dev.takeCalls(); got != "wait "+itoa(a) {
		t.Errorf("AcquireSlot: device calls %q, want a wait for slot %d", got, a)
	}
	if err := s.Publish(a, 0, 0, 3); err != nil {
		t.Fatal(err)
	}
	if got := dev.takeCalls(); got != "copy "+itoa(a)+" 3" {
		t.Errorf("Publish: device calls %q, want the copy of 3 rows of slot %d", got, a)
	}
	m := c.read()
	if num(m, "slot") != a || num(m, "size") != 3 || m["event"] != dev.info.EventHandles[a] {
		t.Errorf("batch message %v, want slot %d, size 3, event %s", m, a, dev.info.EventHandles[a])
	}
	c.release(a)
	b := acquire(t, s)
	if err := s.Publish(b, 0, 1, 5); err != nil {
		t.Fatal(err)
	}
	if m := c.read(); num(m, "slot") != b || m["event"] != dev.info.EventHandles[b] {
		t.Errorf("batch message %v, want slot %d with event %s", m, b, dev.info.EventHandles[b])
	}
	if m := c.read(); m["end"] != true {
		t.Errorf("after the last batch: %v, want the end", m)
	}
}

// TestServerDeviceErrors: a failed copy fails Publish and announces
// nothing; a failed wait fails AcquireSlot and leaves the slot free.
func TestServerDeviceErrors(t *testing.T) {
	dev := newFakeDevice(2)
	_, s := deviceServer(t, dev)
	a := acquire(t, s)
	boom := errors.New("boom")
	dev.failErr = boom
	if err := s.Publish(a, 0, 0, 1); !errors.Is(err, boom) {
		t.Errorf("Publish with a failing copy: %v", err)
	}
	for i := 0; i < 3; i++ {
		if _, err := s.AcquireSlot(context.Background()); !errors.Is(err, boom) {
			t.Errorf("AcquireSlot with a failing wait: %v", err)
		}
	}
	dev.failErr = nil
	if b := acquire(t, s); b == a {
		t.Errorf("AcquireSlot returned slot %d, which the producer holds", b)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.qLen != 0 {
		t.Errorf("%d batches queued after a failed copy", s.qLen)
	}
}

// TestServerDeviceBadInfo: NewServer refuses handles that do not match the ring.
func TestServerDeviceBadInfo(t *testing.T) {
	l := testSpec()
	l.Slots = 2
	r := testRing(t, l)
	for name, mutate := range map[string]func(*DeviceInfo){
		"too few":   func(d *DeviceInfo) { d.MemHandles = d.MemHandles[:1] },
		"short":     func(d *DeviceInfo) { d.EventHandles[1] = "abcd" },
		"not hex":   func(d *DeviceInfo) { d.MemHandles[0] = strings.Repeat("zz", IPCHandleSize) },
		"uppercase": func(d *DeviceInfo) { d.MemHandles[0] = strings.Repeat("AB", IPCHandleSize) },
	} {
		dev := newFakeDevice(2)
		mutate(&dev.info)
		_, err := NewServer(r, Options{SocketPath: testenv.Socket(t, "feed.sock"), BatchesPerEpoch: 1, Device: dev})
		if err == nil {
			t.Errorf("%s: NewServer accepted %+v", name, dev.info)
		}
	}
}

// TestPublishAllocsDevice: the event handle in each batch message costs no
// allocation.
func TestPublishAllocsDevice(t *testing.T) {
	l := testSpec()
	l.Slots = 1
	r := testRing(t, l)
	s, err := NewServer(r, Options{SocketPath: testenv.Socket(t, "feed.sock"), BatchesPerEpoch: 1 << 30,
		Device: nopDevice{newFakeDevice(1).info}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	n := publishAllocs(t, s)
	if n > 0 {
		t.Errorf("AcquireSlot+Publish with a device allocate %v times per batch", n)
	}
}

// nopDevice is a DeviceSlots whose copies cost nothing.
type nopDevice struct{ info DeviceInfo }

func (d nopDevice) Info() DeviceInfo            { return d.info }
func (d nopDevice) CopyToDevice(int, int) error { return nil }
func (d nopDevice) WaitCopied(int) error        { return nil }
