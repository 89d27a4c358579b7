//go:build cuda

package cudafeed

// Tests of the GPU path. They need an NVIDIA driver and a GPU: elsewhere
// the test binary does not get past gorgonia.org/cu's init, which exits
// with status 1 when cuInit fails. Run: go test -tags cuda ./cudafeed/

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/ffcvfs/ffcvfs/internal/testenv"
	"gorgonia.org/cu"
)

func testDeviceRing(t *testing.T, r *Ring) *DeviceRing {
	t.Helper()
	d, err := NewDeviceRing(r, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Error(err)
		}
	})
	return d
}

// readDevice copies device slot i back to the host (after WaitCopied).
func readDevice(t *testing.T, d *DeviceRing, slot int) []byte {
	t.Helper()
	if err := d.WaitCopied(slot); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, d.ring.SlotBytes())
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := cu.SetCurrentContext(d.ctx); err != nil {
		t.Fatal(err)
	}
	if err := cu.MemcpyDtoH(unsafe.Pointer(&buf[0]), d.mem[slot], int64(len(buf))); err != nil {
		t.Fatalf("cuMemcpyDtoH of slot %d: %v", slot, err)
	}
	return buf
}

// fillSlot writes a pattern of seed into every field of host slot i.
func fillSlot(r *Ring, slot int, seed byte) {
	for f, b := range r.Slot(slot) {
		for j := range b {
			b[j] = seed + byte(f*31) + byte(j*7)
		}
	}
}

// TestDeviceRingCopy: CopyToDevice copies the first size rows of every
// field to the device slot, at the ring's offsets, and nothing else.
func TestDeviceRingCopy(t *testing.T) {
	r := testRing(t, testSpec())
	d := testDeviceRing(t, r)
	info := d.Info()
	if len(info.MemHandles) != 3 || len(info.EventHandles) != 3 || !strings.HasPrefix(info.UUID, "GPU-") {
		t.Fatalf("info %+v", info)
	}
	if err := info.validate(3); err != nil {
		t.Fatal(err)
	}
	zero := make([]byte, r.SlotBytes())
	if got := readDevice(t, d, 1); !bytes.Equal(got, zero) {
		t.Fatal("a new device slot is not zeroed")
	}

	fillSlot(r, 1, 1)
	first := append([]byte(nil), r.mem[r.SlotBytes():2*r.SlotBytes()]...)
	if err := d.CopyToDevice(1, 5); err != nil {
		t.Fatal(err)
	}
	got := readDevice(t, d, 1)
	for _, fi := range r.Fields() {
		if !bytes.Equal(got[fi.Offset:fi.Offset+fi.Bytes], first[fi.Offset:fi.Offset+fi.Bytes]) {
			t.Errorf("field %s: the device slot differs from the host slot", fi.Name)
		}
	}

	// A partial batch: rows 0-1 new, rows 2-4 as before.
	fillSlot(r, 1, 100)
	if err := d.CopyToDevice(1, 2); err != nil {
		t.Fatal(err)
	}
	got = readDevice(t, d, 1)
	for _, fi := range r.Fields() {
		row := fi.Bytes / fi.Shape[0]
		host := r.mem[r.SlotBytes()+fi.Offset:]
		if !bytes.Equal(got[fi.Offset:fi.Offset+2*row], host[:2*row]) {
			t.Errorf("field %s: rows 0-1 not copied", fi.Name)
		}
		if !bytes.Equal(got[fi.Offset+2*row:fi.Offset+fi.Bytes], first[fi.Offset+2*row:fi.Offset+fi.Bytes]) {
			t.Errorf("field %s: rows 2-4 changed by a copy of 2 rows", fi.Name)
		}
	}
	for _, s := range []int{0, 2} {
		if !bytes.Equal(readDevice(t, d, s), zero) {
			t.Errorf("slot %d changed by copies into slot 1", s)
		}
	}
	if err := d.CopyToDevice(3, 1); err == nil {
		t.Error("CopyToDevice(slot 3) of a 3-slot ring succeeded")
	}
	if err := d.CopyToDevice(0, 6); err == nil {
		t.Error("CopyToDevice of 6 rows of a batch of 5 succeeded")
	}
}

// TestDeviceRingCopyAllocs: the per-batch path allocates nothing.
func TestDeviceRingCopyAllocs(t *testing.T) {
	r := testRing(t, testSpec())
	d := testDeviceRing(t, r)
	n := testing.AllocsPerRun(100, func() {
		if err := d.WaitCopied(0); err != nil {
			t.Fatal(err)
		}
		if err := d.CopyToDevice(0, 5); err != nil {
			t.Fatal(err)
		}
	})
	if n > 0 {
		t.Errorf("WaitCopied+CopyToDevice allocate %v times per batch", n)
	}
}

// TestDeviceRingServer: a Server with a DeviceRing announces its handles
// and each batch's event.
func TestDeviceRingServer(t *testing.T) {
	r := testRing(t, testSpec())
	d := testDeviceRing(t, r)
	s, err := NewServer(r, Options{SocketPath: testenv.Socket(t, "feed.sock"), BatchesPerEpoch: 1, Epochs: 1,
		Device: d, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := dial(t, s)
	h := c.read()
	cuda, _ := h["cuda"].(map[string]any)
	if mh, _ := cuda["mem_handles"].([]any); len(mh) != 3 || mh[2] != d.Info().MemHandles[2] || cuda["device_uuid"] != d.Info().UUID {
		t.Errorf("hello cuda %v, want %+v", cuda, d.Info())
	}
	i := acquire(t, s)
	fillSlot(r, i, 9)
	if err := s.Publish(i, 0, 0, 4); err != nil {
		t.Fatal(err)
	}
	m := c.read()
	if num(m, "slot") != i || m["event"] != d.Info().EventHandles[i] {
		t.Errorf("batch %v, want slot %d with event %s", m, i, d.Info().EventHandles[i])
	}
	got := readDevice(t, d, i)
	fi := r.Fields()[0]
	if !bytes.Equal(got[fi.Offset:fi.Offset+4*fi.Bytes/5], r.Slot(i)[0][:4*fi.Bytes/5]) {
		t.Error("the published batch is not on the device")
	}
}

// ipcChildEnv carries "MEMHEX EVENTHEX NBYTES" to TestIPCChild.
const ipcChildEnv = "CUDAFEED_TEST_IPC_CHILD"

// TestDeviceRingIPC: another process opens a slot's memory and event
// handles, waits on the event and reads the batch the producer copied.
func TestDeviceRingIPC(t *testing.T) {
	r := testRing(t, testSpec())
	d := testDeviceRing(t, r)
	fillSlot(r, 2, 42)
	n := r.SlotBytes()
	want := sha256.Sum256(r.mem[2*n : 3*n])
	if err := d.CopyToDevice(2, 5); err != nil {
		t.Fatal(err)
	}
	info := d.Info()
	cmd := exec.Command(os.Args[0], "-test.run=^TestIPCChild$", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", ipcChildEnv, info.MemHandles[2], info.EventHandles[2], n))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("consumer process: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "sha256 "+hex.EncodeToString(want[:])) {
		t.Errorf("the consumer read other bytes than the host slot's (sha256 %x):\n%s", want, out)
	}
}

// TestIPCChild is the consumer process of TestDeviceRingIPC. Run otherwise,
// it has nothing to check and passes.
func TestIPCChild(t *testing.T) {
	arg := os.Getenv(ipcChildEnv)
	if arg == "" {
		return
	}
	var memHex, evHex string
	var n int
	if _, err := fmt.Sscan(arg, &memHex, &evHex, &n); err != nil {
		t.Fatal(err)
	}
	decode := func(s string) (h [IPCHandleSize]byte) {
		b, err := hex.DecodeString(s)
		if err != nil || len(b) != IPCHandleSize {
			t.Fatalf("handle %q: %v", s, err)
		}
		copy(h[:], b)
		return h
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, err := cu.GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.RetainPrimaryCtx()
	if err != nil {
		t.Fatal(err)
	}
	defer dev.ReleasePrimaryCtx()
	if err := cu.SetCurrentContext(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := ipcOpenMem(decode(memHex))
	if err != nil {
		t.Fatal(err)
	}
	defer ipcCloseMem(p)
	ev, err := ipcOpenEvent(decode(evHex))
	if err != nil {
		t.Fatal(err)
	}
	defer ev.destroy()
	s, err := cu.MakeStream(cu.NonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	if err := streamWaitEvent(s, ev); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, n)
	if err := cu.MemcpyDtoHAsync(unsafe.Pointer(&buf[0]), p, int64(n), s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf)
	fmt.Println("sha256 " + hex.EncodeToString(sum[:]) + " bytes " + strconv.Itoa(n))
}
