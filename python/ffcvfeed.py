"""Client for ffcvfeed: training batches from a shared-memory ring.

ffcvfeed fills batches in a POSIX shared-memory file and announces them on a
Unix socket (newline-delimited JSON; see the Go package cudafeed). This module
maps the ring and yields NumPy arrays that *view* the shared memory: nothing
is copied.

    with Loader("/run/ffcvfeed.sock") as loader:
        for epoch in range(loader.epochs):
            for images, labels in loader:     # one epoch per loop
                ...

Lifetime: the arrays (or tensors) of batch i are valid until you ask for
batch i+1; asking for the next item releases the previous slot to the
producer, which will overwrite it. Call ``.copy()`` (``.clone()`` in torch)
on anything you keep. The loop that ends an epoch also releases its last
batch.

Iterating the loader yields one epoch: it stops after the last batch of an
epoch, when a batch of the next epoch arrives (a consumer that joined
mid-stream), or at the end of the stream.
"""

import json
import mmap
import os
import socket

import numpy as np

__all__ = ["Loader", "FeedError"]

_DTYPES = {"uint8": np.uint8, "float16": np.float16, "float32": np.float32, "int64": np.int64}


class FeedError(Exception):
    """The server is unreachable or broke the protocol."""


class Loader:
    """Reads batches from an ffcvfeed server.

    socket_path: the server's Unix socket.
    pin: register the ring with CUDA (cudaHostRegister) when torch sees a GPU,
        so .torch() copies to the device asynchronously from pinned memory.
    names: the two fields yielded as (images, labels); default ("images",
        "labels") when present, else the first two fields.
    hello_timeout: seconds to wait for the server's hello.
    """

    def __init__(self, socket_path, pin=False, names=None, hello_timeout=10.0):
        self.socket_path = socket_path
        self._sock = None
        self._rfile = None
        self._mm = None
        self._pinned = False
        self._held = None  # slot whose arrays the caller holds
        self._pending = None  # message read ahead, for the next epoch
        self._event = None  # CUDA event of the last async copy
        self.current = None  # the message of the batch last yielded
        self.ended = False
        try:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._sock.connect(socket_path)
        except (FileNotFoundError, ConnectionRefusedError) as e:
            self._sock.close()
            self._sock = None
            raise FeedError(f"no ffcvfeed server at {socket_path}: {e.strerror}") from e
        self._rfile = self._sock.makefile("rb")
        try:
            self._sock.settimeout(hello_timeout)
            try:
                hello = self._read()
            except socket.timeout as e:
                raise FeedError(f"no hello from {socket_path} within {hello_timeout} s") from e
            self._sock.settimeout(None)
            self._setup(hello, pin, names)
        except BaseException:
            self.close()
            raise

    # --- set-up ---

    def _setup(self, hello, pin, names):
        if "error" in hello:
            raise FeedError(f"ffcvfeed server at {self.socket_path} refused: {hello['error']}")
        try:
            if hello["hello"] != 1:
                raise FeedError(f"unsupported protocol version {hello['hello']}")
            self.shm = str(hello["shm"])
            self.slots = int(hello["slots"])
            self.slot_bytes = int(hello["slot_bytes"])
            self.batches_per_epoch = int(hello["batches_per_epoch"])
            self.epochs = int(hello["epochs"])
            fields = [(str(f["name"]), str(f["dtype"]), tuple(int(d) for d in f["shape"]),
                       int(f["offset"]), int(f["bytes"])) for f in hello["fields"]]
        except (KeyError, TypeError, ValueError) as e:
            raise FeedError(f"malformed hello from {self.socket_path}: {e!r} in {hello!r}") from e
        if not fields or self.slots < 1:
            raise FeedError(f"malformed hello from {self.socket_path}: no fields or slots: {hello!r}")
        for name, dtype, shape, off, nbytes in fields:
            if dtype not in _DTYPES:
                raise FeedError(f"malformed hello: field {name}: unknown dtype {dtype}")
            if int(np.prod(shape)) * np.dtype(_DTYPES[dtype]).itemsize != nbytes or off + nbytes > self.slot_bytes:
                raise FeedError(f"malformed hello: field {name}: shape {shape} does not fit {nbytes} bytes at {off}")
        fd = os.open(self.shm, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size < self.slots * self.slot_bytes:
                raise FeedError(f"{self.shm}: {size} bytes, the hello promises {self.slots * self.slot_bytes}")
            self._mm = mmap.mmap(fd, self.slots * self.slot_bytes, mmap.MAP_SHARED)
        finally:
            os.close(fd)
        self.buffer = np.frombuffer(self._mm, dtype=np.uint8)
        # Views of every field of every slot, built once.
        self._views = [{name: np.ndarray(shape, _DTYPES[dtype], self._mm, i * self.slot_bytes + off)
                        for name, dtype, shape, off, _ in fields} for i in range(self.slots)]
        self.field_names = [f[0] for f in fields]
        if names is None:
            names = ("images", "labels") if {"images", "labels"} <= set(self.field_names) else self.field_names[:2]
        self.names = tuple(names)
        if pin:
            self._pin()

    def _pin(self):
        try:
            import torch
        except ImportError:
            return
        if not torch.cuda.is_available():
            return
        err = torch.cuda.cudart().cudaHostRegister(int(self.buffer.ctypes.data), self.buffer.nbytes, 0)
        if int(err) != 0:
            raise FeedError(f"cudaHostRegister({self.shm}, {self.buffer.nbytes} bytes) failed: {err}")
        self._pinned = True

    # --- protocol ---

    def _read(self):
        line = self._rfile.readline()
        if not line:
            raise FeedError(f"ffcvfeed server at {self.socket_path} closed the connection")
        try:
            msg = json.loads(line)
        except ValueError as e:
            raise FeedError(f"malformed message from {self.socket_path}: {line[:200]!r}") from e
        if not isinstance(msg, dict):
            raise FeedError(f"malformed message from {self.socket_path}: {line[:200]!r}")
        return msg

    def _release(self):
        if self._held is None:
            return
        if self._event is not None:
            self._event.synchronize()  # async copies out of the slot are done
            self._event = None
        slot, self._held = self._held, None
        self._sock.sendall(b'{"release":%d}\n' % slot)

    def _next_msg(self):
        if self._pending is not None:
            msg, self._pending = self._pending, None
            return msg
        msg = self._read()
        if msg.get("end"):
            self.ended = True
        elif "error" in msg:
            raise FeedError(f"ffcvfeed server at {self.socket_path}: {msg['error']}")
        elif not {"slot", "epoch", "batch", "size"} <= msg.keys() or not 0 <= msg["slot"] < self.slots:
            raise FeedError(f"malformed batch message from {self.socket_path}: {msg!r}")
        return msg

    def _batches(self):
        """Yields (message, {field: view}) for one epoch."""
        self._release()
        if self.ended:
            return
        epoch = None
        while True:
            msg = self._next_msg()
            if self.ended:
                return
            if epoch is None:
                epoch = msg["epoch"]
            elif msg["epoch"] != epoch:
                self._pending = msg
                return
            self._held = msg["slot"]
            self.current = msg
            n = msg["size"]
            yield msg, {k: v[:n] for k, v in self._views[msg["slot"]].items()}
            self._release()
            if msg["batch"] == self.batches_per_epoch - 1:
                if self.epochs > 0 and msg["epoch"] == self.epochs - 1:
                    # The last batch of the stream: take the end message now.
                    nxt = self._next_msg()
                    if not self.ended:
                        self._pending = nxt
                return

    # --- public iteration ---

    def __iter__(self):
        """Yields (images, labels) NumPy views for one epoch."""
        a, b = self.names
        for _, f in self._batches():
            yield f[a], f[b]

    def fields(self):
        """Yields a dict {name: NumPy view} of every field, for one epoch."""
        for _, f in self._batches():
            yield f

    def torch(self, device=None):
        """Yields (images, labels) as torch tensors for one epoch.

        Without pinning (or without CUDA) the tensors share the ring's memory
        (torch.from_numpy). With pin=True and CUDA, they are copied to the
        device with non_blocking=True; the copy is awaited before the slot is
        released.
        """
        import torch

        a, b = self.names
        for _, f in self._batches():
            ta, tb = torch.from_numpy(f[a]), torch.from_numpy(f[b])
            if self._pinned:
                ta = ta.cuda(device, non_blocking=True)
                tb = tb.cuda(device, non_blocking=True)
                self._event = torch.cuda.Event()
                self._event.record()
            yield ta, tb

    def dlpack(self):
        """Yields a dict {name: DLPack capsule} of every field, for one epoch
        (zero-copy; for frameworks with from_dlpack)."""
        for _, f in self._batches():
            yield {k: v.__dlpack__() for k, v in f.items()}

    def __len__(self):
        return self.batches_per_epoch

    # --- closing ---

    def close(self):
        """Disconnects and unmaps. Arrays still referenced keep the mapping
        alive until they are dropped."""
        if self._sock is not None:
            try:
                if self._held is not None and self._event is not None:
                    self._event.synchronize()
            finally:
                self._held = None
                self._rfile.close()
                self._sock.close()
                self._sock = None
        if self._mm is not None:
            if self._pinned:
                import torch
                torch.cuda.cudart().cudaHostUnregister(int(self.buffer.ctypes.data))
                self._pinned = False
            self._views = None
            self.buffer = None
            try:
                self._mm.close()
            except BufferError:
                pass  # the caller still holds views; the mapping goes with them
            self._mm = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
