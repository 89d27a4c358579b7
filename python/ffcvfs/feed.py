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

Resuming mid-epoch
------------------

``loader.state_dict()`` says where the stream stands: the epoch and the
batch that come after the last one yielded. Save it with the checkpoint;
to resume, start the server where it says and load it into the new loader,
which checks that the server starts there::

    state = loader.state_dict()     # {"epoch": 3, "batch": 120, ...}
    # ffcvfeed serve ... --start-epoch 3 --start-batch 120
    # (loader.resume_args() gives these flags)
    loader = Loader(sock)
    loader.load_state_dict(state)

The resumed stream holds exactly the batches the old one had not yielded,
the same samples with the same augmentations.

CUDA devices
------------

When the server runs with ``--device cuda:N`` (a build with ``-tags cuda``),
its hello carries IPC handles of one device buffer per slot, and each batch
message the IPC handle of an event recorded after the batch's copy to the
device. The loader then opens the buffers with CuPy (imported only then) and
yields device arrays without copying: CuPy arrays from iteration and
``.fields()``, torch tensors (through DLPack) from ``.torch()``, DLPack
capsules from ``.dlpack()``.

The consumer stream of a batch is the stream current when it is yielded:
``torch.cuda.current_stream()`` for ``.torch()``, CuPy's current stream
otherwise. Before the batch is yielded, that stream is made to wait on the
batch's event, so work enqueued on it sees the whole batch.

Lifetime, and when a slot is released: use a batch only on its consumer
stream (or join other streams to it first, e.g. ``wait_stream``), and only
before asking for the next batch. When the next batch is requested, the
loader records an event on the consumer stream, which thus follows every use
of the batch, and keeps the slot; the slot is given back to the server once
that event has completed, which the loader waits for when the batch after
that is requested (the CPU is kept at most one batch ahead of the GPU), at
the end of each epoch and in ``close()``. The server never overwrites a
slot whose uses are still queued on the GPU. Device arrays kept beyond that
must be copied (``.copy()``, ``.clone()``). With fewer than 3 slots the
wait happens at once, when the next batch is requested, so that the server
always has a slot to fill.

``Loader(..., device=D)`` picks the CuPy device to open the buffers on; by
default the visible device whose UUID (or PCI address) is the server's.
``device="cpu"`` ignores the device buffers and reads the host copies from
shared memory, as with a CPU server.
"""

import collections
import json
import logging
import mmap
import os
import re
import socket
import stat
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from ._args import MAX_POSITION, MAX_RESUMED_RANKS, MAX_WORLD_SIZE, int_arg, segments_arg, short

__all__ = ["Loader", "FeedError", "Ragged"]

_DTYPES = {name: np.dtype(name) for name in (
    "bool", "uint8", "int8", "uint16", "int16", "float16", "uint32", "int32", "float32",
    "uint64", "int64", "float64", "complex64", "complex128")}


class Ragged:
    """A variable-size field of a batch (a beton's bytes or JSON field): the
    samples' bytes one after another in ``data`` (uint8), sample i being
    ``data[offsets[i]:offsets[i+1]]`` (``offsets``: int64, one more than the
    batch's samples). Views of the ring, like every field of a batch.

    ``ragged[i]`` is sample i's bytes (an array view), ``len(ragged)`` the
    number of samples, ``ragged.tolist()`` a list of ``bytes``, and
    ``ragged.json()`` the samples of a JSON field decoded (FFCV stores each
    with a trailing NUL byte, dropped here as ``JSONField.unpack`` does).
    """

    __slots__ = ("data", "offsets")

    def __init__(self, data, offsets):
        self.data = data
        self.offsets = offsets

    def __len__(self):
        return len(self.offsets) - 1

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"sample {i} of a batch of {n}")
        i %= n
        return self.data[int(self.offsets[i]):int(self.offsets[i + 1])]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __repr__(self):
        return f"Ragged({len(self)} samples, {int(self.offsets[-1])} bytes)"

    def tolist(self):
        """Each sample's bytes, copied."""
        return [np.asarray(self[i]).tobytes() for i in range(len(self))]

    def json(self):
        """Each sample of a JSON field, decoded."""
        return [json.loads(b.split(b"\0", 1)[0].decode("utf8")) for b in self.tolist()]


class FeedError(Exception):
    """The server is unreachable or broke the protocol."""


class FeedWarning(UserWarning):
    """A warning of a server the Loader started and owns (its log is
    private): advice such as restart markers a beton lacks."""


class Loader:
    """Reads batches from an ffcvfeed server, or starts one and reads it.

    Three forms::

        Loader("/tmp/feed.sock")                  # a server started by hand
        Loader("train.beton", batch_size=512, epochs=16, resolution=160)
        Loader([("a.beton", 0.7), ("b.beton", 0.3)], epoch_size=100000, ...)

    In the second, ``source`` is what ``ffcvfeed serve --data`` takes (a
    beton, ``s3://``, ``http(s)://``, an ffcvfs mountpoint); in the third a
    list of them, each with its weight (``ffcvfeed serve --weights``: a
    proportion, ``"x2"`` a repeat factor, ``"n1000"`` a count; a source
    alone is taken once an epoch), mixed in one stream whose batches carry
    a field ``"source"``, each sample's index in the list. Every other
    keyword argument that is not one of the Loader's own becomes a flag of
    ``ffcvfeed serve`` (``batch_size=512`` → ``--batch-size 512``, ``True``
    → the flag alone). The Loader starts the server on a private socket,
    owns it, and stops it on ``close()``, on leaving a ``with`` block, when
    it is garbage-collected or the interpreter exits, and when the Python
    process ends, however it ends (the server watches its parent). A server that
    fails to start raises FeedError with its own message. The program is
    ``$FFCVFEED``, else the one built into this package, else ``ffcvfeed``
    on the PATH.

    socket_path: the server's Unix socket, or the data to start one on.
    pin: register the ring with CUDA (cudaHostRegister) when torch sees a GPU,
        so .torch() copies to the device asynchronously from pinned memory.
        Ignored when the server delivers to a CUDA device.
    names: the fields iteration and .torch() yield, as a tuple in this
        order; default every field the server delivers ("image", "label"
        unless it was started with --fields / fields=).
    hello_timeout: seconds to wait for the server's hello.
    connect_timeout: seconds to wait for the server to come up (its socket
        to appear and accept), so that a job may start the server and the
        loader together; 0 fails at once when no server is there.
    device: for a server that delivers to a CUDA device: the CuPy device id
        to open its buffers on (default: the server's device, found by UUID),
        or "cpu" to read the host copies instead.
    """

    def __init__(self, socket_path: str, pin: bool = False, names: Optional[Sequence[str]] = None,
                 hello_timeout: float = 10.0, device: Union[int, str, None] = None,
                 connect_timeout: float = 30.0, **serve_flags: Any) -> None:
        self._server = None
        if serve_flags or _is_data(socket_path):
            self._server = _Server(socket_path, serve_flags)
            socket_path = self._server.socket_path
        self.mixture = ""  # the fingerprint of the server's mixture of sources
        self.socket_path = socket_path
        self._sock = None
        self._rfile = None
        self._mm = None
        self._pinned = False
        self._held = None  # slot whose arrays the caller holds
        self._pending = None  # message read ahead, for the next epoch
        self._event = None  # CUDA event of the last async copy
        self._cuda = None  # _DeviceSlots when the batches are read from a CUDA device
        self._held_stream = None  # CUDA mode: the consumer stream of the held batch
        self._unreleased = collections.deque()  # CUDA mode: slots whose release waits on an event
        self.current = None  # the message of the batch last yielded
        self.ended = False
        self.device = None  # CUDA mode: the CuPy device id of the buffers
        try:
            if self._server is None:
                self._sock = _connect(socket_path, connect_timeout)
            else:
                # A server of its own may take minutes to open remote data;
                # it is watched, and its end is an error at once.
                self._sock = _connect(socket_path, max(connect_timeout, 600.0), self._server.check)
        except BaseException:
            self.close()
            raise
        self._rfile = self._sock.makefile("rb")
        try:
            self._sock.settimeout(hello_timeout)
            try:
                hello = self._read()
            except socket.timeout as e:
                raise FeedError(f"no hello from {socket_path} within {hello_timeout} s") from e
            self._sock.settimeout(None)
            self._setup(hello, pin, names, device)
        except BaseException:
            self.close()
            raise

    # --- set-up ---

    def _setup(self, hello, pin, names, device):
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
            # Where the stream starts (a resumed server); 0 from servers
            # that do not say.
            self.start_epoch = int(hello.get("start_epoch", 0))
            self.start_batch = int(hello.get("start_batch", 0))
            # The stream's order, for resuming it at another world size:
            # its world size and batch size, and the parts of start_epoch
            # read before (ffcvfeed serve --resume).
            self.world_size = int(hello.get("world_size", 1))
            self.batch_size = int(hello.get("batch_size", 0))
            self.segments = [[int(w), int(p)] for w, p in hello.get("segments", [])]
            self.mixture = str(hello.get("mixture", ""))
            fields = [(str(f["name"]), str(f["dtype"]), tuple(int(d) for d in f["shape"]),
                       int(f["offset"]), int(f["bytes"])) for f in hello["fields"]]
            # Variable-size fields: name → the field of their samples' ends.
            self._ends = {str(f["name"]): str(f["ends"]) for f in hello["fields"] if f.get("ends")}
        except (KeyError, TypeError, ValueError) as e:
            raise FeedError(f"malformed hello from {self.socket_path}: {e!r} in {hello!r}") from e
        if not fields or self.slots < 1:
            raise FeedError(f"malformed hello from {self.socket_path}: no fields or slots: {hello!r}")
        for name, dtype, shape, off, nbytes in fields:
            if dtype not in _DTYPES:
                raise FeedError(f"malformed hello: field {name}: unknown dtype {dtype}")
            if int(np.prod(shape)) * _DTYPES[dtype].itemsize != nbytes or off + nbytes > self.slot_bytes:
                raise FeedError(f"malformed hello: field {name}: shape {shape} does not fit {nbytes} bytes at {off}")
        self._ends_of = set(self._ends.values())
        kinds = {f[0]: f for f in fields}
        for name, ends in self._ends.items():
            e = kinds.get(ends)
            if e is None or e[1] != "int64" or len(e[2]) != 1 or len(kinds[name][2]) != 2:
                raise FeedError(f"malformed hello: variable-size field {name}: its ends field {ends} is not int64 [batch]")
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
        # The batch's fields; a variable-size field's ends are part of it.
        self.field_names = [f[0] for f in fields if f[0] not in self._ends_of]
        if names is None:
            names = self.field_names
        unknown = [n for n in names if n not in self.field_names]
        if unknown:
            raise FeedError(f"the server at {self.socket_path} delivers fields {self.field_names}, not {unknown}")
        self.names = tuple(names)
        if "cuda" in hello and device != "cpu":
            self._cuda = _DeviceSlots(hello["cuda"], fields, self.slots, self.slot_bytes, device, self.socket_path)
            self.device = self._cuda.device
            # Keep one batch unreleased only when that leaves the server a
            # slot to fill while the caller holds the next batch.
            self._defer = 1 if self.slots >= 3 else 0
        elif pin:
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

    def _release(self, flush=False):
        """Gives back the slot of the batch last yielded (CPU mode); in CUDA
        mode, records an event after its uses on its consumer stream, and
        gives back the slots whose events completed, waiting for all but the
        newest (all of them when flush)."""
        if self._cuda is not None:
            if self._held is not None:
                self._cuda.record(self._held, self._held_stream)
                self._unreleased.append(self._held)
                self._held, self._held_stream = None, None
            while len(self._unreleased) > (0 if flush else self._defer):
                slot = self._unreleased.popleft()
                self._cuda.synchronize(slot)
                self._sock.sendall(b'{"release":%d}\n' % slot)
            return
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
        elif self._cuda is not None and not _is_handle(msg.get("event")):
            raise FeedError(f"malformed batch message from {self.socket_path}: no event handle: {msg!r}")
        return msg

    def _batches(self, stream=None):
        """Yields (message, {field: view}) for one epoch. CUDA mode: device
        arrays; stream() returns the consumer stream (a pointer), by default
        CuPy's current stream."""
        self._release(flush=True)
        if self.ended:
            if self._server is not None:
                raise FeedError(f"the Loader of {self._server.data} has delivered the {self.epochs} epoch(s) it was "
                                f"made for (epochs={self.epochs}): give epochs= as many as the loop reads")
            raise FeedError(f"the stream of {self.socket_path} has ended: the server delivered the "
                            f"{self.epochs} epoch(s) it was started with (ffcvfeed serve --epochs); "
                            f"start it with the number of epochs the loop reads")
        epoch = None
        while True:
            msg = self._next_msg()
            if self.ended:
                self._release(flush=True)
                return
            if epoch is None:
                epoch = msg["epoch"]
            elif msg["epoch"] != epoch:
                self._pending = msg
                return
            self._held = msg["slot"]
            self.current = msg
            n = msg["size"]
            if self._cuda is not None:
                self._held_stream = stream() if stream is not None else self._cuda.current_stream()
                self._cuda.wait(msg["event"], self._held_stream)
                views = self._cuda.views[msg["slot"]]
            else:
                views = self._views[msg["slot"]]
            yield msg, self._batch_fields(views, n, self._cuda is not None)
            if self._server is not None:
                for w in self._server.warnings():
                    warnings.warn(w, FeedWarning, stacklevel=3)
            last = msg["batch"] == self.batches_per_epoch - 1
            self._release(flush=last)
            if last:
                if self.epochs > 0 and msg["epoch"] == self.epochs - 1:
                    # The last batch of the stream: take the end message now.
                    nxt = self._next_msg()
                    if not self.ended:
                        self._pending = nxt
                return

    def _batch_fields(self, views, n, on_device=False):
        """The first n samples of each field of a slot's views; a
        variable-size field as a Ragged (on a device its data keep the
        field's whole capacity: the end is known on the device only)."""
        out = {}
        for k, v in views.items():
            if k in self._ends_of:
                continue
            if k in self._ends:
                ends = views[self._ends[k]][:n]
                xp = self._cuda.cp if on_device else np
                offsets = xp.concatenate([xp.zeros(1, ends.dtype), ends])
                data = v.reshape(-1)
                if not on_device:
                    data = data[:int(offsets[-1])]
                out[k] = Ragged(data, offsets)
            else:
                out[k] = v[:n]
        return out

    # --- public iteration ---

    def __iter__(self):
        """Yields a tuple of the fields in ``names`` for one epoch, by
        default every field: (images, labels) from a server started with its
        default fields. NumPy views (CuPy arrays in CUDA mode); variable-size
        fields as Ragged."""
        for _, f in self._batches():
            yield tuple(f[k] for k in self.names)

    def fields(self):
        """Yields a dict {name: NumPy view} of every field, for one epoch
        (CuPy arrays in CUDA mode; variable-size fields as Ragged)."""
        for _, f in self._batches():
            yield f

    def host_batch(self):
        """The shared-memory (host) views of the batch last yielded, the
        first `size` rows of each field. In CUDA mode they hold the same
        bytes as the device arrays, under the same lifetime rule."""
        if self.current is None or self._views is None:
            return None
        return self._batch_fields(self._views[self.current["slot"]], self.current["size"])

    def torch(self, device=None, channels_last=False):
        """Yields the fields in ``names`` as torch tensors for one epoch
        (variable-size fields as a Ragged of tensors).

        device: None or "cpu": tensors that share the ring's memory
        (torch.from_numpy), unless pin=True, which means the current CUDA
        device. "cuda" or "cuda:N": each batch is copied to the device,
        asynchronously (non_blocking=True) from pinned memory with pin=True,
        the copy awaited before the slot is released. A CUDA device that
        torch does not see raises FeedError on the first batch, rather than
        CPU tensors. In CUDA mode (a server with --device) the tensors share
        the server's device buffers (DLPack), and torch's current stream is
        the consumer stream.

        channels_last: NHWC image batches (4-D, last dimension 3) come as
        NCHW-shaped tensors in torch's channels_last memory format: a view
        of the same memory (permute), no copy, as FFCV's ToTorchImage gives.
        Convolutions on a GPU take it as it is; it spares the server the
        transpose of ``--layout nchw``.
        """
        import torch

        def nchw(t):
            if channels_last and t.dim() == 4 and t.shape[3] == 3:
                return t.permute(0, 3, 1, 2)
            return t

        if self._cuda is not None:
            if device is not None and torch.device(device) != torch.device("cuda", self.device):
                raise FeedError(f"the batches are on cuda:{self.device}, not {device}: pass device= to Loader")
            from torch.utils.dlpack import from_dlpack

            def stream():
                return torch.cuda.current_stream(self.device).cuda_stream

            for _, f in self._batches(stream):
                yield tuple(_map(lambda a: nchw(from_dlpack(a)), f[k]) for k in self.names)
            return

        target = torch.device(device) if device is not None else None
        if target is not None and target.type == "cuda" and not torch.cuda.is_available():
            raise FeedError(f"torch({device!r}): torch sees no CUDA device (torch.cuda.is_available() is False); "
                            f"call .torch() for CPU tensors, or run where a GPU and torch's CUDA build are")
        if target is not None and target.type not in ("cpu", "cuda"):
            raise FeedError(f"torch({device!r}): the batches go to the CPU or a CUDA device, not {target.type}")
        if target is None and self._pinned:
            target = torch.device("cuda")  # pin=True: the current device, as ever
        to_device = target is not None and target.type == "cuda"

        def convert(a):
            t = nchw(torch.from_numpy(a))
            if to_device:
                # Asynchronous from pinned memory; otherwise a plain copy.
                return t.to(target, non_blocking=self._pinned)
            return t

        for _, f in self._batches():
            out = tuple(_map(convert, f[k]) for k in self.names)
            if self._pinned:
                self._event = torch.cuda.Event()
                self._event.record()
            yield out

    def dlpack(self):
        """Yields a dict {name: DLPack capsule} of every field, for one epoch
        (zero-copy; for frameworks with from_dlpack). In CUDA mode the
        capsules are of device memory, and CuPy's current stream is the
        consumer stream."""
        for _, f in self._batches():
            yield {k: _map(lambda a: a.__dlpack__(), v) for k, v in f.items()}

    def __len__(self) -> int:
        return self.batches_per_epoch

    # --- resuming ---

    def state_dict(self) -> Dict[str, Any]:
        """Where the stream stands: ``epoch`` and ``batch`` of the batch after
        the last one yielded (the start of the stream before any), the
        stream's shape (``batches_per_epoch``, ``epochs``), and for a resume
        at another world size its ``world_size``, ``batch_size``, the
        ``position`` reached in this rank's order of the epoch's current
        part and the ``segments`` read before it; for several sources, the
        ``mixture`` they make (a fingerprint of the sources, weights and
        seed: a resume under another mixture is refused)."""
        if self.current is None:
            epoch, batch = self.start_epoch, self.start_batch
        else:
            epoch, batch = self.current["epoch"], self.current["batch"] + 1
            if batch == self.batches_per_epoch:
                epoch, batch = epoch + 1, 0
        segments: List[List[int]] = []
        position = batch * self.batch_size
        if self.segments and epoch == self.start_epoch:
            # This epoch is the rest after earlier parts, standing in the
            # epoch's last batches from start_batch on.
            segments = [list(x) for x in self.segments]
            position = (batch - self.start_batch) * self.batch_size
        st = {"epoch": epoch, "batch": batch, "batches_per_epoch": self.batches_per_epoch, "epochs": self.epochs,
              "world_size": self.world_size, "batch_size": self.batch_size, "position": position,
              "segments": segments}
        if self.mixture:
            st["mixture"] = self.mixture
        return st

    def resume_args(self, world_size: Optional[int] = None) -> List[str]:
        """The flags of ``ffcvfeed serve`` that resume the stream after the
        last batch yielded: ``["--start-epoch", E, "--start-batch", B]`` for a
        server of the same world size, or ``["--start-epoch", E, "--resume",
        "W0xP0[,W1xP1...]"]`` for one of ``world_size`` ranks (each rank of
        the new job gets its share of the rest of the epoch; give each its
        own ``--rank`` and the new ``--world-size``)."""
        st = self.state_dict()
        if world_size is not None:
            world_size = int_arg("world_size", world_size, 1, MAX_WORLD_SIZE)
        expected = _expected_segments(st, world_size)
        mixture = ["--mixture", st["mixture"]] if st.get("mixture") else []
        if not expected:
            return ["--start-epoch", str(st["epoch"]), "--start-batch", str(st["batch"])] + mixture
        return ["--start-epoch", str(st["epoch"]), "--resume", ",".join(f"{w}x{p}" for w, p in expected)] + mixture

    def resume_kwargs(self, world_size: Optional[int] = None) -> Dict[str, Any]:
        """resume_args() as keyword arguments, for a Loader that starts its
        own server: ``Loader("train.beton", ..., **loader.resume_kwargs())``
        gives ``start_epoch=E, start_batch=B`` (or ``resume="W0xP0,..."``
        for a new world size)."""
        args = self.resume_args(world_size)
        return {args[i][2:].replace("-", "_"): int(args[i + 1]) if args[i + 1].isdigit() else args[i + 1]
                for i in range(0, len(args), 2)}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Checks that this loader's server resumes the stream where
        ``state_dict`` (from ``state_dict()`` of an earlier loader, of any
        rank) left it: started with the flags ``resume_args()`` gave, for
        this server's world size. Raises FeedError otherwise: a stream
        started elsewhere would repeat or skip samples."""
        try:
            epoch, batch = state_dict["epoch"], state_dict["batch"]
        except (KeyError, TypeError, IndexError) as e:
            raise ValueError(f"not a Loader state (want epoch and batch): {short(state_dict)}") from e
        epoch, batch = int_arg("epoch", epoch, 0), int_arg("batch", batch, 0, MAX_POSITION)
        bpe = int_arg("batches_per_epoch", state_dict.get("batches_per_epoch", self.batches_per_epoch), 0, MAX_POSITION)
        expected = _expected_segments(state_dict, self.world_size)
        if self.current is not None:
            raise FeedError("load_state_dict() must come before the first batch")
        saved = str(state_dict.get("mixture", ""))
        if saved != self.mixture and (batch or expected):
            raise FeedError(f"the state was saved under the mixture {saved or 'of one source'}, the server at "
                            f"{self.socket_path} reads {self.mixture or 'one source'}: a weight, a source, the epoch "
                            f"size or the seed changed; start it with the sources and weights of the state, or with "
                            f"--resume-changed new-epoch to start the next epoch whole")
        if expected:
            if epoch != self.start_epoch or self.segments != expected:
                have = ",".join(f"{w}x{p}" for w, p in self.segments) or "none"
                want = ",".join(f"{w}x{p}" for w, p in expected)
                raise FeedError(f"the server at {self.socket_path} starts at epoch {self.start_epoch} after the parts "
                                f"{have}, the state resumes epoch {epoch} after {want}: start it with "
                                f"--start-epoch {epoch} --resume {want}")
            return
        if bpe != self.batches_per_epoch and int(state_dict.get("world_size", self.world_size)) == self.world_size:
            raise FeedError(f"the state is of a stream of {bpe} batches per epoch, the server at "
                            f"{self.socket_path} makes {self.batches_per_epoch}: start it with the same data and batch size")
        if (epoch, batch) != (self.start_epoch, self.start_batch) or self.segments:
            raise FeedError(f"the server at {self.socket_path} starts at epoch {self.start_epoch} batch "
                            f"{self.start_batch}, the state resumes at epoch {epoch} batch {batch}: start it with "
                            f"--start-epoch {epoch} --start-batch {batch}")

    # --- closing ---

    def close(self):
        """Disconnects and unmaps. Arrays still referenced keep the mapping
        alive until they are dropped. In CUDA mode, close first waits until
        the consumer streams are done with the batches, then closes the
        device buffers: device arrays must not be used afterwards."""
        if self._sock is not None:
            try:
                if self._cuda is not None:
                    if self._held is not None:
                        self._cuda.record(self._held, self._held_stream)
                        self._unreleased.append(self._held)
                    for slot in self._unreleased:
                        self._cuda.synchronize(slot)
                    self._unreleased.clear()
                elif self._held is not None and self._event is not None:
                    self._event.synchronize()
            finally:
                self._held = None
                self._rfile.close()
                self._sock.close()
                self._sock = None
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None
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
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _map(fn, v):
    """fn of an array, or of each array of a Ragged."""
    return Ragged(fn(v.data), fn(v.offsets)) if isinstance(v, Ragged) else fn(v)


def _expected_segments(state, world_size):
    """The parts of the state's epoch a server of world_size ranks resumes
    after (--resume), or [] when it resumes with --start-batch: the same
    world size and no earlier parts, or nothing of the epoch read yet.
    Every number is checked as the server checks it (ValueError)."""
    segments = [[w, p] for w, p in segments_arg(state.get("segments", []))]
    world = int_arg("world_size", state.get("world_size", 1), 1, MAX_WORLD_SIZE)
    position = int_arg("position", state.get("position", 0), 0, MAX_POSITION)
    if sum(w for w, _ in segments) + world > MAX_RESUMED_RANKS:
        raise ValueError(f"the state's parts have more than {MAX_RESUMED_RANKS} ranks in all")
    if not segments and (world_size is None or world_size == world):
        return []
    if not segments and position == 0:
        return []
    return segments + [[world, position]]


def _as_kwargs(text):
    """A server's message in the words of a Loader that owns it: its flags
    as the keyword arguments that gave them (--batch-size → batch_size=)."""
    def kw(m):
        if m.group(1) == "help":
            return m.group(0)
        return m.group(1).replace("-", "_") + "=" + (m.group(2) or "")
    # --flag, or --flag VALUE: a word or a quoted string, before a colon, a comma, a space or the end.
    return re.sub(r"(?<![\w-])--([a-z][a-z0-9-]*)(?: (\"[^\"]*\"|[^\s:;,'\"-][^\s:;,'\"]*)(?=[:;,\s]|$))?", kw, text)


def _is_data(source):
    """Whether source names data for a server to start on rather than a
    server's socket: a URL, a .beton, or an existing file or folder that is
    not a socket; or a list of sources to mix."""
    if isinstance(source, (list, tuple)):
        return True
    source = os.fspath(source)
    if "://" in source or source.endswith(".beton") or source == "-":
        return True
    try:
        st = os.stat(source)
    except OSError:
        return False
    return not stat.S_ISSOCK(st.st_mode)


def _flag_args(flags, folder=None):
    """ffcvfeed serve's flags from keyword arguments: batch_size=512 →
    --batch-size 512; True → the flag alone; False and None → left out;
    a list, tuple or array → its items joined by commas, or, for long lists
    of sample ids (indices=, replace_label_indices=, ...), written to a
    file in folder and passed as @FILE."""
    args = []
    for key, value in flags.items():
        name = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if value is True:
            args.append(name)
        elif isinstance(value, (list, tuple, range)):
            text = ",".join(str(v) for v in value)
            if folder is not None and key.endswith("indices") and len(text) > 4096:
                path = os.path.join(folder, key + ".txt")
                with open(path, "w") as f:
                    f.write(text)
                text = "@" + path
            args += [name, text]
        else:
            args += [name, str(value)]
    return args


def _data_args(data):
    """ffcvfeed serve's --data (and --weights) of a Loader's source: one
    location, or a list of locations or (location, weight) pairs to mix."""
    if not isinstance(data, (list, tuple)):
        return ["--data", os.fspath(data)]
    if not data:
        raise ValueError("Loader([]): give the sources to mix, as [(location, weight), ...]")
    locations, weights = [], []
    for i, item in enumerate(data):
        if isinstance(item, (list, tuple)):
            if len(item) != 2:
                raise ValueError(f"Loader source {i}: {short(item)}: want (location, weight)")
            location, weight = item
            if isinstance(weight, bool) or not isinstance(weight, (int, float, str)):
                raise ValueError(f"Loader source {i}: weight {short(weight)}: want a number, \"x2\" or \"n1000\"")
            weights.append(repr(float(weight)) if isinstance(weight, (int, float)) else weight)
        else:
            location = item
        locations.append(os.fspath(location))
    if weights and len(weights) != len(locations):
        raise ValueError("Loader sources: give every source a weight, or none (each source once an epoch)")
    args = []
    for location in locations:
        args += ["--data", location]
    if weights:
        args += ["--weights", ",".join(weights)]
    return args


class _Server:
    """An ffcvfeed serve process a Loader owns, on a socket in a folder of
    its own (mode 0700)."""

    def __init__(self, data, flags):
        import shutil
        import subprocess
        import tempfile
        from ._programs import program
        exe = os.environ.get("FFCVFEED") or program("ffcvfeed") or shutil.which("ffcvfeed")
        if not exe:
            raise FeedError("cannot start ffcvfeed: the package holds no build of it, it is not on the PATH, "
                            "and $FFCVFEED is not set (build it: go build -o bin/ ./cmd/ffcvfeed)")
        self.dir = tempfile.mkdtemp(prefix="ffcvfeed-", dir=_socket_parent())
        self.socket_path = os.path.join(self.dir, "feed.sock")
        try:
            data_args = _data_args(data)
        except BaseException:
            import shutil
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.data = ", ".join(v for k, v in zip(data_args[::2], data_args[1::2]) if k == "--data")
        self._log = open(os.path.join(self.dir, "serve.log"), "w+b")
        self._warned_at = 0  # the log's bytes looked at for warnings
        args = [exe, "serve"] + data_args + ["--socket", self.socket_path] + _flag_args(flags, self.dir)
        try:
            # Its own session: a Ctrl-C meant for training reaches the
            # Loader, which stops the server. FFCVFEED_EXIT_WITH_PARENT: the
            # server ends when this process does, however it ends, and then
            # removes this folder (FFCVFEED_OWNED_FOLDER), socket and log.
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                         start_new_session=True,
                                         env=dict(os.environ, FFCVFEED_EXIT_WITH_PARENT="1",
                                                  FFCVFEED_OWNED_FOLDER=self.dir))
        except OSError as e:
            self._cleanup()
            raise FeedError(f"cannot start {exe}: {e}") from e
        # Stopped when the Loader is garbage-collected or at exit, whichever
        # comes first.
        import weakref
        self._finalizer = weakref.finalize(self, _stop_server, self.proc, self.dir, self._log)

    def check(self):
        """Raises FeedError, with the server's own words, if it has ended."""
        if self.proc.poll() is not None:
            raise FeedError(f"the Loader's ffcvfeed server for {self.data} ended (exit {self.proc.returncode}): "
                            f"{_as_kwargs(self.message())}")

    def warnings(self):
        """The messages of the warnings (level=WARN) the server logged
        since the last call, whole lines only, at most 1 MiB a call."""
        try:
            size = os.fstat(self._log.fileno()).st_size
        except (OSError, ValueError):
            return []
        if size <= self._warned_at:
            return []
        try:
            with open(os.path.join(self.dir, "serve.log"), "rb") as f:
                f.seek(self._warned_at)
                data = f.read(min(size - self._warned_at, 1 << 20))
        except OSError:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) < 1 << 20:
            return []  # a line still being written
        end = end or len(data)
        self._warned_at += end
        out = []
        for line in data[:end].decode(errors="replace").splitlines():
            if "level=WARN" in line:
                m = re.search(r'msg=("(?:[^"\\]|\\.)*"|\S+)', line)
                text = m.group(1) if m else line
                if text.startswith('"'):
                    try:
                        text = json.loads(text)
                    except ValueError:
                        text = text[1:-1]
                out.append(f"ffcvfeed serve --data {self.data}: {text}")
        return out

    def message(self):
        try:
            self._log.flush()
            with open(os.path.join(self.dir, "serve.log"), "rb") as f:
                lines = f.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        errors = [ln for ln in lines if ln.startswith("ffcvfeed:") or "level=ERROR" in ln or " ERROR " in ln]
        return " ".join((errors or lines)[-3:]) or "(nothing logged)"

    def stop(self):
        self._finalizer()

    def _cleanup(self):
        import shutil
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def _stop_server(proc, folder, log):
    """Ends a server a Loader started: SIGTERM, then SIGKILL after 10 s,
    and removes its folder."""
    import shutil
    import subprocess
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()
    shutil.rmtree(folder, ignore_errors=True)


# The longest path a Unix socket may have on Linux (sun_path, less its NUL).
_MAX_SOCKET_PATH = 107


def _socket_parent():
    """The folder for a server's private folder: $XDG_RUNTIME_DIR where
    writable, else the temporary folder, else /tmp; the first where the
    socket's path (FOLDER/ffcvfeed-XXXXXXXX/feed.sock) fits a Unix socket,
    whatever TMPDIR is."""
    import tempfile
    extra = len("/ffcvfeed-XXXXXXXX/feed.sock")
    for base in (os.environ.get("XDG_RUNTIME_DIR"), tempfile.gettempdir(), "/tmp"):
        if base and len(os.fsencode(base)) + extra <= _MAX_SOCKET_PATH and os.path.isdir(base) \
                and os.access(base, os.W_OK | os.X_OK):
            return base
    raise FeedError(f"no folder for ffcvfeed's socket: $XDG_RUNTIME_DIR, the temporary folder ({tempfile.gettempdir()}) "
                    f"and /tmp are missing, not writable, or too long for a socket's path; set TMPDIR to a short folder")


def _connect(path, timeout, check=None):
    """Connects to the Unix socket at path, trying again while no server
    listens there yet, for up to timeout seconds; check(), when given, is
    called between tries (it raises when the server has died). Without
    check (a server started by someone else), a missing folder fails at
    once, and a wait says so at its start on the logger "ffcvfs"."""
    folder = os.path.dirname(os.path.abspath(path))
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH:
        raise FeedError(f"the socket {path} is {len(os.fsencode(path))} bytes long, more than the {_MAX_SOCKET_PATH} a "
                        f"Unix socket's path may have: give a shorter path (under /tmp, say), or set TMPDIR to a "
                        f"shorter folder")
    if check is None and not os.path.isdir(folder):
        raise FeedError(f"no ffcvfeed server at {path}: the folder {folder} does not exist, so no server can listen "
                        f"there; start one with: ffcvfeed serve --data DATA --socket {path} (after mkdir -p {folder}), "
                        f"or give Loader the data (Loader(DATA, ...)) to start one of its own")
    deadline = time.monotonic() + max(timeout, 0.0)
    delay = 0.01
    told = False
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(path)
            return sock
        except (FileNotFoundError, ConnectionRefusedError) as e:
            sock.close()
            if check is not None:
                check()
            why = ("its socket is there, but no server listens on it (a server that ended?)"
                   if isinstance(e, ConnectionRefusedError) else "no socket there yet")
            left = deadline - time.monotonic()
            if left <= 0:
                waited = f" (waited {timeout:g} s)" if timeout > 0 else ""
                raise FeedError(f"no ffcvfeed server at {path}: {why}{waited}; start one with: ffcvfeed serve "
                                f"--data DATA --socket {path}, or give Loader the data (Loader(DATA, ...)) to start "
                                f"one of its own") from e
            if check is None and not told:
                logging.getLogger("ffcvfs").warning(
                    "waiting up to %g s for an ffcvfeed server at %s (%s): start one with ffcvfeed serve --socket %s, "
                    "or pass connect_timeout=0 to fail at once", timeout, path, why, path)
                told = True
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.25)
        except BaseException:
            sock.close()
            raise


def _is_handle(h):
    """A CUDA IPC handle in the protocol: 64 bytes as 128 lowercase hex digits."""
    return isinstance(h, str) and len(h) == 128 and all(c in "0123456789abcdef" for c in h)


def _uuid_hex(u):
    """"GPU-xxxxxxxx-xxxx-…", bytes or any hex form → 32 lowercase hex digits, or None."""
    if isinstance(u, (bytes, bytearray)):
        return bytes(u).hex() if len(u) == 16 else None
    if not isinstance(u, str):
        return None
    h = u.lower().removeprefix("gpu-").replace("-", "")
    return h if len(h) == 32 else None


def _pci(s):
    """"DDDD:BB:DD.F" (any widths) → (domain, bus, device), or None."""
    try:
        dom, bus, rest = str(s).split(":")
        return int(dom, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


class _DeviceSlots:
    """The server's device buffers, opened through CuPy: one per slot, and
    the batch events. Only for servers that deliver to a CUDA device."""

    def __init__(self, info, fields, slots, slot_bytes, device, socket_path):
        try:
            import cupy
        except ImportError as e:
            raise FeedError(f"the ffcvfeed server at {socket_path} delivers to a CUDA device: reading its batches "
                            "needs CuPy (pip install cupy-cuda12x, or cupy-cuda11x); "
                            "Loader(..., device='cpu') reads the host copies instead") from e
        self.cp = cupy
        self.rt = rt = cupy.cuda.runtime
        self.ptrs = []
        self.release_events = []
        self.events = {}  # event handle (hex) → opened event
        try:
            handles = info["mem_handles"]
            if not isinstance(handles, list) or len(handles) != slots or not all(_is_handle(h) for h in handles):
                raise FeedError(f"malformed hello from {socket_path}: cuda.mem_handles must be {slots} handles: {info!r}")
            self.device = self._pick(info, device, socket_path)
            with cupy.cuda.Device(self.device):
                for h in handles:
                    self.ptrs.append(rt.ipcOpenMemHandle(bytes.fromhex(h), rt.cudaIpcMemLazyEnablePeerAccess))
                self.views = []
                for ptr in self.ptrs:
                    mem = cupy.cuda.UnownedMemory(ptr, slot_bytes, self, self.device)
                    self.views.append({name: cupy.ndarray(shape, _DTYPES[dtype], cupy.cuda.MemoryPointer(mem, off))
                                       for name, dtype, shape, off, _ in fields})
                for _ in range(slots):
                    self.release_events.append(rt.eventCreateWithFlags(_EVENT_DISABLE_TIMING))
        except (KeyError, TypeError, ValueError) as e:
            self.close()
            raise FeedError(f"malformed hello from {socket_path}: {e!r} in cuda {info!r}") from e
        except BaseException:
            self.close()
            raise

    def _pick(self, info, device, socket_path):
        """The CuPy device id of the server's device."""
        if device is not None:
            return int(device)
        rt = self.rt
        n = rt.getDeviceCount()
        want_uuid, want_pci = _uuid_hex(info.get("device_uuid")), _pci(info.get("pci_bus_id"))
        for d in range(n):
            if want_uuid is not None and _uuid_hex(rt.getDeviceProperties(d).get("uuid")) == want_uuid:
                return d
        for d in range(n):
            if want_pci is not None and _pci(rt.deviceGetPCIBusId(d)) == want_pci:
                return d
        if n == 1:
            return 0
        raise FeedError(f"the ffcvfeed server at {socket_path} delivers to {info.get('device_uuid')} "
                        f"({info.get('pci_bus_id')}), which is none of the {n} devices this process sees: "
                        "pass Loader(..., device=N)")

    def current_stream(self):
        with self.cp.cuda.Device(self.device):
            return self.cp.cuda.get_current_stream().ptr

    def wait(self, handle, stream):
        """Makes stream wait on the batch event whose handle is given."""
        ev = self.events.get(handle)
        with self.cp.cuda.Device(self.device):
            if ev is None:
                ev = self.events[handle] = self.rt.ipcOpenEventHandle(bytes.fromhex(handle))
            self.rt.streamWaitEvent(stream, ev, 0)

    def record(self, slot, stream):
        with self.cp.cuda.Device(self.device):
            self.rt.eventRecord(self.release_events[slot], stream)

    def synchronize(self, slot):
        self.rt.eventSynchronize(self.release_events[slot])

    def close(self):
        """Closes the buffers and destroys the events; arrays on them must
        not be used afterwards."""
        rt = self.rt
        dev = getattr(self, "device", None)
        ctx = self.cp.cuda.Device(dev) if dev is not None else None
        if ctx is not None:
            ctx.__enter__()
        try:
            for ev in list(self.events.values()) + self.release_events:
                rt.eventDestroy(ev)
            self.events, self.release_events = {}, []
            self.views = None
            for ptr in self.ptrs:
                rt.ipcCloseMemHandle(ptr)
            self.ptrs = []
        finally:
            if ctx is not None:
                ctx.__exit__(None, None, None)


# cudaEventDisableTiming
_EVENT_DISABLE_TIMING = 0x02
