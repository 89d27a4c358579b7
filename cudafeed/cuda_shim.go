//go:build cuda

package cudafeed

// What gorgonia.org/cu does not wrap, called through the driver API:
// registering host memory as pinned, interprocess events (cu.Event hides
// its CUevent, which cuIpcGetEventHandle needs) and IPC handles. The C
// functions keep no pointers; the Go wrappers turn CUresult codes into
// errors. The functions that open handles serve consumers written in Go
// and the tests.

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <string.h>

static CUresult ffcv_host_register(void *p, size_t n) {
	return cuMemHostRegister(p, n, CU_MEMHOSTREGISTER_PORTABLE);
}

static CUresult ffcv_host_unregister(void *p) {
	return cuMemHostUnregister(p);
}

static CUresult ffcv_ipc_mem_handle(CUdeviceptr p, unsigned char *out) {
	CUipcMemHandle h;
	CUresult r = cuIpcGetMemHandle(&h, p);
	if (r == CUDA_SUCCESS) memcpy(out, h.reserved, CU_IPC_HANDLE_SIZE);
	return r;
}

static CUresult ffcv_ipc_open_mem(const unsigned char *in, CUdeviceptr *p) {
	CUipcMemHandle h;
	memcpy(h.reserved, in, CU_IPC_HANDLE_SIZE);
	return cuIpcOpenMemHandle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
}

static CUresult ffcv_ipc_close_mem(CUdeviceptr p) {
	return cuIpcCloseMemHandle(p);
}

static CUresult ffcv_event_create(CUevent *ev) {
	return cuEventCreate(ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
}

static CUresult ffcv_ipc_event_handle(CUevent ev, unsigned char *out) {
	CUipcEventHandle h;
	CUresult r = cuIpcGetEventHandle(&h, ev);
	if (r == CUDA_SUCCESS) memcpy(out, h.reserved, CU_IPC_HANDLE_SIZE);
	return r;
}

static CUresult ffcv_ipc_open_event(const unsigned char *in, CUevent *ev) {
	CUipcEventHandle h;
	memcpy(h.reserved, in, CU_IPC_HANDLE_SIZE);
	return cuIpcOpenEventHandle(ev, h);
}

static CUresult ffcv_event_record(CUevent ev, CUstream s) { return cuEventRecord(ev, s); }
static CUresult ffcv_event_synchronize(CUevent ev) { return cuEventSynchronize(ev); }
static CUresult ffcv_event_destroy(CUevent ev) { return cuEventDestroy(ev); }
static CUresult ffcv_stream_wait_event(CUstream s, CUevent ev) { return cuStreamWaitEvent(s, ev, 0); }

static const char *ffcv_error_name(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorName(r, &s) != CUDA_SUCCESS || s == NULL) return "CUDA_ERROR_UNKNOWN";
	return s;
}

static const char *ffcv_error_string(CUresult r) {
	const char *s = NULL;
	if (cuGetErrorString(r, &s) != CUDA_SUCCESS || s == NULL) return "unknown error";
	return s;
}
*/
import "C"

import (
	"fmt"
	"unsafe"

	"gorgonia.org/cu"
)

// The handle size of the protocol is the driver's.
var _ [IPCHandleSize - C.CU_IPC_HANDLE_SIZE]struct{}
var _ [C.CU_IPC_HANDLE_SIZE - IPCHandleSize]struct{}

// DriverError is a CUDA driver call that failed.
type DriverError struct {
	Call string // e.g. "cuMemHostRegister"
	Code int    // CUresult
	Name string // e.g. "CUDA_ERROR_INVALID_VALUE"
	Msg  string // the driver's description
}

func (e *DriverError) Error() string {
	return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
}

func check(call string, r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return &DriverError{Call: call, Code: int(r),
		Name: C.GoString(C.ffcv_error_name(r)), Msg: C.GoString(C.ffcv_error_string(r))}
}

// cStream is cu's stream as this package's C type: cgo gives every package
// its own copy of C.CUstream, and cu returns its own.
func cStream(s cu.Stream) C.CUstream { return C.CUstream(unsafe.Pointer(s.C())) }

// hostRegister page-locks mem (memory mapped outside the Go heap) for every
// context (CU_MEMHOSTREGISTER_PORTABLE), so that copies out of it are DMA.
func hostRegister(mem []byte) error {
	return check("cuMemHostRegister", C.ffcv_host_register(unsafe.Pointer(unsafe.SliceData(mem)), C.size_t(len(mem))))
}

func hostUnregister(mem []byte) error {
	return check("cuMemHostUnregister", C.ffcv_host_unregister(unsafe.Pointer(unsafe.SliceData(mem))))
}

// ipcMemHandle exports the allocation that starts at p.
func ipcMemHandle(p cu.DevicePtr) (h [IPCHandleSize]byte, err error) {
	err = check("cuIpcGetMemHandle", C.ffcv_ipc_mem_handle(C.CUdeviceptr(p), (*C.uchar)(&h[0])))
	return h, err
}

// ipcOpenMem maps another process's allocation into the current context.
func ipcOpenMem(h [IPCHandleSize]byte) (cu.DevicePtr, error) {
	var p C.CUdeviceptr
	err := check("cuIpcOpenMemHandle", C.ffcv_ipc_open_mem((*C.uchar)(&h[0]), &p))
	return cu.DevicePtr(p), err
}

func ipcCloseMem(p cu.DevicePtr) error {
	return check("cuIpcCloseMemHandle", C.ffcv_ipc_close_mem(C.CUdeviceptr(p)))
}

// ipcEvent is an event created with CU_EVENT_DISABLE_TIMING |
// CU_EVENT_INTERPROCESS, or opened from another process's handle.
type ipcEvent struct{ ev C.CUevent }

func newIPCEvent() (ipcEvent, error) {
	var e ipcEvent
	err := check("cuEventCreate(CU_EVENT_DISABLE_TIMING|CU_EVENT_INTERPROCESS)", C.ffcv_event_create(&e.ev))
	return e, err
}

func ipcOpenEvent(h [IPCHandleSize]byte) (ipcEvent, error) {
	var e ipcEvent
	err := check("cuIpcOpenEventHandle", C.ffcv_ipc_open_event((*C.uchar)(&h[0]), &e.ev))
	return e, err
}

func (e ipcEvent) handle() (h [IPCHandleSize]byte, err error) {
	err = check("cuIpcGetEventHandle", C.ffcv_ipc_event_handle(e.ev, (*C.uchar)(&h[0])))
	return h, err
}

func (e ipcEvent) record(s cu.Stream) error {
	return check("cuEventRecord", C.ffcv_event_record(e.ev, cStream(s)))
}

func (e ipcEvent) synchronize() error {
	return check("cuEventSynchronize", C.ffcv_event_synchronize(e.ev))
}

func (e ipcEvent) destroy() error {
	return check("cuEventDestroy", C.ffcv_event_destroy(e.ev))
}

// streamWaitEvent makes s wait for e's last record.
func streamWaitEvent(s cu.Stream, e ipcEvent) error {
	return check("cuStreamWaitEvent", C.ffcv_stream_wait_event(cStream(s), e.ev))
}
