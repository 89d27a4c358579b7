"""Tests of ffcvfeed.Loader's CUDA mode against a fake server and a fake CuPy.

No GPU is needed: a stand-in for the few CuPy calls the loader makes backs
each "device buffer" with host memory and logs every call, so the tests
check what the loader asks of CUDA and when (waits before yielding, a
release only after the consumer stream's event completed), not CUDA itself.
python/check_ffcvfeed_cuda.py (scripts/device-check.sh) checks the real thing.

Run: PYTHONPATH=python /usr/bin/python3 -m unittest python/test_ffcvfeed_cuda_client.py
"""

import contextlib
import sys
import types
import unittest

import numpy as np

from ffcvfs import FeedError, Loader
import test_ffcvfeed_client as cpu_tests

MEM = ["%02x" % i * 64 for i in range(3)]  # three slots' memory handles
EV = ["e%d" % i + "0" * 126 for i in range(3)]  # their event handles


class FakeServer(cpu_tests.FakeServer):
    """The fake server of the CPU tests, quiet when the loader hangs up first."""

    def _serve(self):
        try:
            super()._serve()
        except (BrokenPipeError, ConnectionResetError):
            pass


class FakeCupy:
    """The part of CuPy that ffcvfeed uses, on host memory, with a call log."""

    def __init__(self, slot_bytes, uuid=b"\x01" * 16, pci="0000:65:00.0", devices=2):
        self.log = []
        self.buffers = {}  # device pointer → host bytes standing for it
        self.stream_ptr = 0
        fake = self
        rt = types.SimpleNamespace(cudaIpcMemLazyEnablePeerAccess=1)

        def ipcOpenMemHandle(handle, flags):
            assert isinstance(handle, bytes) and len(handle) == 64 and flags == 1
            ptr = 0x1000 * (len(fake.buffers) + 1)
            fake.buffers[ptr] = bytearray(slot_bytes)
            fake.log.append(("open_mem", handle.hex(), fake.device))
            return ptr

        def ipcOpenEventHandle(handle):
            assert isinstance(handle, bytes) and len(handle) == 64
            fake.log.append(("open_event", handle.hex()))
            return 0x9000 + handle[0]

        rt.ipcOpenMemHandle = ipcOpenMemHandle
        rt.ipcOpenEventHandle = ipcOpenEventHandle
        rt.ipcCloseMemHandle = lambda ptr: fake.log.append(("close_mem", ptr))
        self.nevents = 0

        def eventCreateWithFlags(flags):
            assert flags == 2  # cudaEventDisableTiming
            fake.nevents += 1
            return 0x5000 + fake.nevents

        rt.eventCreateWithFlags = eventCreateWithFlags
        rt.eventDestroy = lambda ev: fake.log.append(("destroy", ev))
        rt.eventRecord = lambda ev, stream: fake.log.append(("record", ev, stream))
        rt.eventSynchronize = lambda ev: fake.log.append(("sync", ev))
        rt.streamWaitEvent = lambda stream, ev, flags: fake.log.append(("wait", stream, ev))
        rt.getDeviceCount = lambda: devices
        rt.getDeviceProperties = lambda d: {"uuid": uuid if d == 1 else b"\x02" * 16}
        rt.deviceGetPCIBusId = lambda d: pci if d == 1 else "0000:01:00.0"
        self.device = None

        @contextlib.contextmanager
        def Device(d):
            old, fake.device = fake.device, d
            try:
                yield
            finally:
                fake.device = old

        def UnownedMemory(ptr, size, owner, device_id):
            return types.SimpleNamespace(ptr=ptr, size=size, device_id=device_id)

        def MemoryPointer(mem, off):
            return (mem.ptr, off)

        def ndarray(shape, dtype, memptr):
            ptr, off = memptr
            return np.ndarray(shape, dtype, fake.buffers[ptr], off)

        self.module = types.ModuleType("cupy")
        self.module.cuda = types.SimpleNamespace(
            runtime=rt, Device=Device, UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
            get_current_stream=lambda: types.SimpleNamespace(ptr=fake.stream_ptr))
        self.module.ndarray = ndarray

    def calls(self, *kinds):
        return [c for c in self.log if c[0] in kinds]


class CudaLoaderTest(unittest.TestCase):
    def setUp(self):
        base = cpu_tests.LoaderTest("test_batches_and_releases")
        base.setUp()
        self.addCleanup(base.tearDown)
        base.shm.truncate(3 * 128)  # a third slot, never used by the batches below
        self.hello = dict(base.hello, slots=3, cuda={"device": 3, "device_uuid": "GPU-01010101-0101-0101-0101-010101010101",
                                            "pci_bus_id": "0000:65:00.0", "mem_handles": MEM})
        self.cupy = FakeCupy(128)
        saved = sys.modules.get("cupy")
        sys.modules["cupy"] = self.cupy.module
        self.addCleanup(lambda: sys.modules.__setitem__("cupy", saved) if saved else sys.modules.pop("cupy", None))

    def batch(self, slot, epoch, batch, size):
        return {"slot": slot, "epoch": epoch, "batch": batch, "size": size, "event": EV[slot]}

    def fill_labels(self):
        """Writes labels into the fake device buffers: slot s holds 100*(s+1)+row."""
        for i, ptr in enumerate(sorted(self.cupy.buffers)):
            np.ndarray((4,), np.int64, self.cupy.buffers[ptr], 64)[:] = [100 * (i + 1) + r for r in range(4)]

    def test_opens_handles_on_the_servers_device(self):
        srv = FakeServer([self.hello, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                self.assertEqual(loader.device, 1)  # found by UUID, not the server's ordinal 3
                self.assertEqual(self.cupy.calls("open_mem"), [("open_mem", h, 1) for h in MEM])
                self.assertEqual(list(loader), [])
            self.assertEqual(sorted(c[1] for c in self.cupy.calls("close_mem")), sorted(self.cupy.buffers))
        finally:
            srv.close()

    def test_device_by_pci_and_by_argument(self):
        for hello_cuda, kwargs, want in [
            ({"device_uuid": "GPU-truncated"}, {}, 1),  # UUID unusable: the PCI address decides
            ({}, {"device": 0}, 0),
        ]:
            cupy = FakeCupy(128, uuid=b"\x01")
            sys.modules["cupy"] = cupy.module
            srv = FakeServer([dict(self.hello, cuda=dict(self.hello["cuda"], **hello_cuda)), {"end": True}])
            try:
                with Loader(srv.path, **kwargs) as loader:
                    self.assertEqual(loader.device, want)
            finally:
                srv.close()

    def test_unknown_device(self):
        sys.modules["cupy"] = FakeCupy(128, uuid=b"\x07" * 16, pci="0000:99:00.0").module
        srv = FakeServer([self.hello])
        try:
            with self.assertRaisesRegex(FeedError, "none of the 2 devices"):
                Loader(srv.path, hello_timeout=1)
        finally:
            srv.close()

    def test_malformed_cuda_hello(self):
        for cuda in [{"mem_handles": MEM[:2]}, {"mem_handles": ["zz" * 64] * 3}, {"mem_handles": "x"}, {}]:
            srv = FakeServer([dict(self.hello, cuda=dict(self.hello["cuda"], **cuda) if cuda else {})])
            try:
                with self.assertRaisesRegex(FeedError, "malformed hello"):
                    Loader(srv.path, hello_timeout=1)
            finally:
                srv.close()

    def test_batch_without_event(self):
        srv = FakeServer([self.hello, {"slot": 0, "epoch": 0, "batch": 0, "size": 4}])
        try:
            with Loader(srv.path) as loader:
                with self.assertRaisesRegex(FeedError, "no event handle"):
                    list(loader)
        finally:
            srv.close()

    def test_no_cupy(self):
        sys.modules["cupy"] = None  # import cupy raises ImportError
        srv = FakeServer([self.hello])
        try:
            with self.assertRaisesRegex(FeedError, "needs CuPy"):
                Loader(srv.path, hello_timeout=1)
        finally:
            srv.close()

    def test_cpu_reads_host_copies(self):
        srv = FakeServer([self.hello, self.batch(1, 0, 0, 4), self.batch(0, 0, 1, 3), {"end": True}])
        try:
            with Loader(srv.path, device="cpu") as loader:
                got = [labels.tolist() for _, labels in loader]
            self.assertEqual(got, [[20, 21, 22, 23], [10, 11, 12]])
            self.assertEqual(self.cupy.log, [])
        finally:
            srv.close()
        self.assertEqual(srv.received, b'{"release":1}\n{"release":0}\n')

    def test_waits_then_releases_one_batch_late(self):
        # Two epochs of two batches, slots alternating.
        lines = [dict(self.hello, epochs=2), self.batch(1, 0, 0, 4), self.batch(0, 0, 1, 3),
                 self.batch(1, 1, 0, 4), self.batch(0, 1, 1, 2), {"end": True}]
        srv = FakeServer(lines)
        cu = self.cupy
        rel = {0: 0x5001, 1: 0x5002}  # the loader's release event of each slot
        try:
            with Loader(srv.path) as loader:
                self.fill_labels()
                seen = []
                for epoch in range(2):
                    for k, (images, labels) in enumerate(loader):
                        slot = loader.current["slot"]
                        cu.stream_ptr += 1  # every batch used on a new stream: the record follows it
                        # The consumer stream waited on this batch's event before the yield.
                        self.assertEqual(cu.log[-1], ("wait", cu.stream_ptr - 1, 0x9000 + int(EV[slot][:2], 16)))
                        seen.append((labels.tolist(), images.shape[0]))
                        # Batch k-1 has its event recorded but is not released before batch k+1 is asked for.
                        self.assertEqual(list(loader._unreleased), [] if k == 0 else [1 - slot])
                    # The end of an epoch waits for its last batch and releases everything.
                    self.assertEqual(list(loader._unreleased), [])
                    self.assertEqual(cu.log[-2:], [("sync", rel[1]), ("sync", rel[0])])
                self.assertTrue(loader.ended)
            self.assertEqual(seen, [([200, 201, 202, 203], 4), ([100, 101, 102], 3),
                                    ([200, 201, 202, 203], 4), ([100, 101], 2)])
            # Each release event was recorded on the stream of its batch, before its sync.
            self.assertEqual(cu.calls("record"), [("record", rel[1], 0), ("record", rel[0], 1),
                                                  ("record", rel[1], 2), ("record", rel[0], 3)])
            # Event handles are opened once each.
            self.assertEqual(len(cu.calls("open_event")), 2)
        finally:
            srv.close()
        self.assertEqual(srv.received, b'{"release":1}\n{"release":0}\n{"release":1}\n{"release":0}\n')

    def test_release_order_within_an_epoch(self):
        # One epoch of three batches: the release of batch 0 waits for the request of batch 2.
        hello = dict(self.hello, batches_per_epoch=3)
        srv = FakeServer([hello, self.batch(0, 0, 0, 4), self.batch(1, 0, 1, 4), self.batch(0, 0, 2, 1), {"end": True}])
        try:
            with Loader(srv.path) as loader:
                it = iter(loader)
                next(it)
                next(it)
                self.assertEqual(self.cupy.calls("sync"), [])  # batch 0's release deferred
                next(it)
                self.assertEqual(self.cupy.calls("sync"), [("sync", 0x5001)])
                self.assertEqual(list(loader._unreleased), [1])
                self.assertEqual(list(it), [])
        finally:
            srv.close()

    def test_few_slots_release_at_once(self):
        # With 1 or 2 slots, holding one back would leave the server none to fill.
        for slots, second in ((1, 0), (2, 1)):
            cupy = FakeCupy(128)
            sys.modules["cupy"] = cupy.module
            hello = dict(self.hello, slots=slots, cuda=dict(self.hello["cuda"], mem_handles=MEM[:slots]))
            srv = FakeServer([hello, self.batch(0, 0, 0, 4), self.batch(second, 0, 1, 4), {"end": True}])
            try:
                with Loader(srv.path) as loader:
                    it = iter(loader)
                    next(it)
                    next(it)
                    self.assertEqual(cupy.calls("record", "sync"), [("record", 0x5001, 0), ("sync", 0x5001)])
                    self.assertEqual(list(loader._unreleased), [])
                    self.assertEqual(list(it), [])
            finally:
                srv.close()
            self.assertEqual(srv.received, b'{"release":0}\n{"release":%d}\n' % second)

    def test_close_waits_for_held_batches(self):
        srv = FakeServer([self.hello, self.batch(1, 0, 0, 4), self.batch(0, 0, 1, 4), {"end": True}])
        try:
            loader = Loader(srv.path)
            it = iter(loader)
            next(it)
            next(it)  # batch 0 unreleased, batch 1 held
            loader.close()
            log = self.cupy.log
            self.assertEqual(log[log.index(("record", 0x5001, 0)) + 1:][:3],
                             [("sync", 0x5002), ("sync", 0x5001), ("destroy", 0x9000 + 0xe1)])
            closes = [i for i, c in enumerate(log) if c[0] == "close_mem"]
            self.assertTrue(closes and min(closes) > log.index(("sync", 0x5001)), log)
        finally:
            srv.close()

    def test_torch(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.skipTest("torch not installed")
        # torch.utils.dlpack.from_dlpack needs real device memory: check only
        # that a device mismatch is refused before anything is read.
        srv = FakeServer([self.hello, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                with self.assertRaisesRegex(FeedError, "on cuda:1"):
                    next(loader.torch(device="cuda:0"))
        finally:
            srv.close()


if __name__ == "__main__":
    unittest.main()
