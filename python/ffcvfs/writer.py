"""DatasetWriter: writes a beton from any dataset, a drop-in for FFCV's
``ffcv.writer.DatasetWriter`` (same constructor, same methods, FFCV's
fields from :mod:`ffcvfs.fields`)::

    from ffcvfs.writer import DatasetWriter      # was: from ffcv.writer import DatasetWriter
    from ffcvfs.fields import RGBImageField, IntField

    writer = DatasetWriter("train.beton", {"image": RGBImageField(max_resolution=256),
                                           "label": IntField()}, num_workers=8)
    writer.from_indexed_dataset(dataset)

num_workers processes (forked, so the dataset is not pickled) only fetch
samples and send them, framed, each over a pipe of its own, to one
``ffcvfs write --from-stream`` process, which decodes, resizes, encodes
and packs pages on all cores and shows the progress. fname may be
``s3://bucket/key``: the beton is uploaded as it is written and appears
only when it is complete. Memory stays bounded: each worker holds about a
MiB of frames, the Go process a few samples per core and a page.

A sample that cannot be written (a wrong shape or dtype, an image that
cannot be decoded, a value JSON cannot encode, an exception of the
dataset, its sys.exit or KeyboardInterrupt) raises :class:`WriteError`
naming its index and field, and nothing is left at fname; so does a worker
that dies (the OOM killer's SIGKILL, os._exit), naming the worker, how it
ended and the sample it was on. If this process dies, its workers and the
writer stop with it, and nothing is left either.
"""

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Callable, List, Mapping, Optional, Sequence

import numpy as np

from .fields import Field
from ._programs import sigint_ignored

__all__ = ["DatasetWriter", "WriteError"]

MIN_PAGE_SIZE = 1 << 21
MAX_PAGE_SIZE = 1 << 32

_FRAME = struct.Struct("<IBQ")  # size, kind, id
_ERROR = struct.Struct("<IBQH")
_FLUSH = 1 << 20
_F_SETPIPE_SZ = 1031
_NO_FIELD = 0xFFFF
_MAX_PARTS = 1000  # below IOV_MAX (1024), for writev


class WriteError(ValueError):
    """A beton could not be written: the message names the sample and field,
    or what else went wrong."""


def _program() -> str:
    from ._programs import program
    exe = os.environ.get("FFCVFS") or program("ffcvfs") or shutil.which("ffcvfs")
    if not exe:
        raise WriteError("cannot write: the package holds no build of ffcvfs, it is not on the PATH, and $FFCVFS "
                         "is not set (build it: go build -o bin/ ./cmd/ffcvfs)")
    return exe


class DatasetWriter:
    """Writes a dataset into a .beton, as FFCV's DatasetWriter does.

    fname: the beton to write (a path, or s3://bucket/key).
    fields: a mapping from names to fields (order matters), FFCV's classes
    from :mod:`ffcvfs.fields`. Names longer than 16 bytes are cut to 16, as
    FFCV cuts them.
    page_size: a power of two, 2 MiB to 4 GiB (FFCV's default, 8 MiB).
    num_workers: processes fetching samples; -1 or 0: one per core.
    seed: draws of write_mode='proportion', per sample (FFCV's are not
    reproducible).
    """

    def __init__(self, fname: str, fields: Mapping[str, Field], page_size: int = 4 * MIN_PAGE_SIZE,
                 num_workers: int = -1, *, seed: int = 0):
        self.fname = os.fspath(fname)
        self.fields = dict(fields)
        if not self.fields:
            raise ValueError("a beton needs at least one field")
        for name, field in self.fields.items():
            if not isinstance(field, Field):
                raise TypeError(f"field {name!r}: want a field of ffcvfs.fields, got {type(field).__name__}")
        page_size = int(page_size)
        if page_size & (page_size - 1) or not MIN_PAGE_SIZE <= page_size < MAX_PAGE_SIZE:
            raise ValueError(f"page_size {page_size}: want a power of two, at least {MIN_PAGE_SIZE} and below {MAX_PAGE_SIZE}")
        self.page_size = page_size
        self.num_workers = int(num_workers)
        if self.num_workers < 1:
            self.num_workers = len(os.sched_getaffinity(0))
        self.num_workers = min(self.num_workers, 256)
        self.seed = int(seed)
        names = []
        for name in self.fields:
            if not isinstance(name, str) or not name or not name.isascii():
                raise ValueError(f"field name {name!r}: want a non-empty ASCII string, as FFCV's")
            cut = name[:16]
            if cut in names:
                raise ValueError(f"field {name!r}: cut to 16 bytes, its name is {cut!r}, as another field's")
            names.append(cut)
        self._names = names

    def _header(self, n: int) -> bytes:
        h = {"format": "ffcvfs-stream", "version": 1, "samples": int(n), "page_size": self.page_size,
             "fields": [f.spec(name) for name, f in zip(self._names, self.fields.values())]}
        if self.seed:
            h["seed"] = self.seed
        body = json.dumps(h).encode()
        return struct.pack("<IB", len(body) + 1, ord("H")) + body

    def from_indexed_dataset(self, dataset, indices: Optional[Sequence[int]] = None, chunksize: int = 100,
                             shuffle_indices: bool = False):
        """Writes dataset[indices[0]], dataset[indices[1]], ... as samples
        0, 1, ...: every index of the dataset by default, shuffled (with
        NumPy's global generator, as FFCV) when shuffle_indices. Each
        sample is a tuple of values in the fields' order. Workers take
        chunks of chunksize indices in turn."""
        if indices is None:
            indices = np.arange(len(dataset))
        indices = np.array(indices, dtype=np.int64).reshape(-1)
        if shuffle_indices:
            np.random.shuffle(indices)
        chunksize = max(1, int(chunksize))
        chunks = [(start, indices[start:start + chunksize]) for start in range(0, len(indices), chunksize)]

        def work(k, emit):
            for start, idx in chunks[k::self.num_workers]:
                for j, src in enumerate(idx.tolist()):
                    emit(start + j, lambda src=src: dataset[src], index=src)

        self._write(len(indices), work)

    def from_webdataset(self, shards: List[str], pipeline: Callable):
        """Writes the samples of webdataset shards, each read through
        pipeline(WebDataset(shard)), in shard order: the shards are counted
        first (a pass over each), then written, a shard per worker at a
        time."""
        from webdataset import WebDataset

        def read(shard):
            return pipeline(WebDataset(shard))

        counts = [sum(1 for _ in read(s)) for s in shards]
        offsets = np.cumsum([0] + counts)[:-1].tolist()

        def work(k, emit):
            for shard, off in list(zip(shards, offsets))[k::self.num_workers]:
                for j, sample in enumerate(read(shard)):
                    emit(off + j, lambda sample=sample: sample)

        self._write(sum(counts), work)

    def _write(self, n: int, work: Callable):
        header = self._header(n)
        fields = list(self.fields.values())
        nw = max(1, min(self.num_workers, n))
        pipes = [os.pipe() for _ in range(nw)]
        for r, w in pipes:
            try:
                import fcntl
                fcntl.fcntl(w, _F_SETPIPE_SZ, _FLUSH)
            except OSError:
                pass  # the default pipe size works, a little slower
        exe = _program()
        args = [exe, "write"]
        for r, _ in pipes:
            args += ["--from-stream", f"fd:{r}"]
        args += ["--", self.fname]  # a name may start with "-"
        # ffcvfs write closes ready_w once it catches SIGINT and SIGTERM
        # (_wait_ready); started with SIGINT ignored until then.
        ready_r, ready_w = os.pipe()
        env = dict(os.environ, FFCVFS_EXIT_WITH_PARENT="1", FFCVFS_WRITE_READY_FD=str(ready_w))
        env.pop("FFCVFS_PROGRESS", None)
        try:
            if sys.stderr is not None and sys.stderr.isatty():
                # ffcvfs write's stderr is a pipe to _Tail, which passes
                # its progress bar on to this terminal.
                env["FFCVFS_PROGRESS"] = "1"
        except (AttributeError, ValueError, OSError):
            pass
        try:
            with sigint_ignored():
                # Its summary (standard output) is printed once its
                # progress bar (standard error, passed on by _Tail) has
                # ended its line, not into the middle of it.
                proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        env=env, pass_fds=[r for r, _ in pipes] + [ready_w])
        except OSError as e:
            for r, w in pipes:
                os.close(r)
                os.close(w)
            os.close(ready_r)
            raise WriteError(f"cannot start {exe}: {e}") from e
        finally:
            os.close(ready_w)
        tail = _Tail(proc.stderr)
        summary = _Tail(proc.stdout, out=None)
        for r, _ in pipes:
            os.close(r)
        import multiprocessing
        ctx = multiprocessing.get_context("fork")
        # Per worker: the sample it is on, its dataset index, its state.
        state = ctx.Array("q", [-1, -1, _RUNNING] * nw, lock=False)
        workers = []
        try:
            # Ctrl-C reaches every process of the terminal's group: the
            # workers ignore it (this process and ffcvfs write, which
            # aborts the write, act on it), and it is held while they are
            # forked, until they have set that.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                for k in range(nw):
                    p = ctx.Process(target=_worker, args=(k, pipes, header, fields, work, state), daemon=True)
                    p.start()
                    workers.append(p)
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
            for _, w in pipes:
                os.close(w)
            pipes = []
            code = proc.wait()
        except BaseException as e:
            for _, w in pipes:
                os.close(w)
            # Signaled before it catches signals, it would end unheard.
            _wait_ready(ready_r)
            proc.send_signal(signal.SIGTERM)
            proc.wait()
            for p in workers:
                p.kill()
            if isinstance(e, KeyboardInterrupt):
                # ffcvfs write has said what became of the beton; the
                # interrupt goes on without the frames it came through.
                raise KeyboardInterrupt from None
            raise
        finally:
            os.close(ready_r)
            tail.join()
            summary.join()
            _print(summary.last)
        # A worker that ended by itself before the writer failed may be
        # why it did (the writer saw its stream end early); workers still
        # busy are killed, and are no cause.
        ended = {}
        deadline = time.monotonic() + (5 if code == 0 else 1)  # for all of them
        for k, p in enumerate(workers):
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
            else:
                ended[k] = p.exitcode
        if code == _INTERRUPTED:
            # ffcvfs write said so ("interrupted; … was not written") and
            # left nothing: the interrupt goes on as Python's own.
            raise KeyboardInterrupt from None
        if code != 0:
            deaths = [_death(k, nw, ended[k], state) for k in sorted(ended)
                      if ended[k] != 0 or state[3 * k + 2] == _RUNNING]
            if deaths:
                raise WriteError("; ".join(deaths) + f"; the beton was not written (ffcvfs write said: {tail.message()})")
            raise WriteError(tail.message())


def _wait_ready(fd):
    """Waits until ffcvfs write catches SIGINT and SIGTERM, or has ended:
    the end of the pipe it closes then (FFCVFS_WRITE_READY_FD)."""
    while True:
        try:
            if not os.read(fd, 1):
                return
        except InterruptedError:
            continue
        except KeyboardInterrupt:
            continue  # a second Ctrl-C: the write ends at once all the same


def _print(b):
    """Writes the bytes b to this process's standard output."""
    if not b:
        return
    try:
        out = getattr(sys.stdout, "buffer", None)
        if out is not None:
            sys.stdout.flush()
            out.write(b)
            out.flush()
        elif sys.stdout is not None:
            sys.stdout.write(b.decode(errors="replace"))
    except (OSError, ValueError):
        pass


class _Tail(threading.Thread):
    """Passes the writer's stderr (its progress bar) on, keeping its last
    lines for the error message; with out=None it passes nothing on and
    keeps the last 8 KiB (the summary on standard output)."""

    def __init__(self, pipe, out="stderr"):
        super().__init__(daemon=True)
        self.pipe = pipe
        self.forward = out is not None
        self.last = b""
        self.start()

    def run(self):
        out = getattr(sys.stderr, "buffer", None)
        while True:
            b = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
            if not b:
                break
            self.last = (self.last + b)[-8192:]
            if not self.forward:
                continue
            try:
                if out is not None:
                    out.write(b)
                    out.flush()
                else:
                    sys.stderr.write(b.decode(errors="replace"))
            except (OSError, ValueError):
                pass
        self.pipe.close()

    def message(self):
        lines = [ln.strip() for ln in self.last.decode(errors="replace").replace("\r", "\n").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith("ffcvfs:") or "not written" in ln]
        return (errors or lines or ["ffcvfs write failed"])[-1]


# A worker's state in the shared array.
_RUNNING, _DONE, _STOPPED = 0, 1, 2


def _death(k, nw, code, state):
    """Says how worker k ended, with exit status code, and the sample it was
    on, for a worker that ended by itself before sending its samples."""
    sid, index = state[3 * k], state[3 * k + 1]
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        how = f"was killed by {name}"
        if -code == signal.SIGKILL:
            how += " (the kernel's OOM killer kills so when memory runs out)"
    elif code == 0:
        how = "ended with exit status 0 (os._exit?)"
    else:
        how = f"exited with status {code} (os._exit?)"
    if sid < 0:
        at = "before its first sample"
    else:
        at = f"on sample {sid}" + (f" (dataset index {index})" if index >= 0 else "")
    if code == 0:
        at += ", before its last"
    return f"worker {k} of {nw} {how} {at}"


# The exit status of ffcvfs write stopped by a signal.
_INTERRUPTED = 130


def _worker(k, pipes, header, fields, work, state):
    """A worker: sends the samples work(k) gives, then ends its stream."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _die_with_parent()
    fd = pipes[k][1]
    for i, (r, w) in enumerate(pipes):
        if i != k:
            os.close(w)
    parts: List[bytes] = [header]
    size = len(header)

    def flush():
        nonlocal parts, size
        total = sum(len(p) for p in parts)
        n = os.writev(fd, parts) if parts else 0
        if n < total:  # a partial write (a signal): the rest at once
            view = memoryview(b"".join(parts))[n:]
            while view:
                view = view[os.write(fd, view):]
        parts, size = [], 0

    def emit(sid, fetch, index=-1):
        nonlocal size
        field = _NO_FIELD
        state[3 * k], state[3 * k + 1] = sid, index
        try:
            sample = fetch()
            if not isinstance(sample, (tuple, list)):
                sample = (sample,)
            if len(sample) != len(fields):
                raise ValueError(f"the dataset gave {len(sample)} values for {len(fields)} fields")
            body: List[bytes] = []
            for field, (f, v) in enumerate(zip(fields, sample)):
                f.encode(v, body)
            field = _NO_FIELD
            n = 9 + sum(len(b) for b in body)
            if n >= 1 << 32:
                raise ValueError(f"the sample takes {n} bytes; a frame holds less than 4 GiB")
            parts.append(_FRAME.pack(n, ord("S"), sid))
            parts.extend(body)
            size += n + 4
        except BaseException as e:
            # The dataset's exception, and its sys.exit or
            # KeyboardInterrupt, end the write naming the sample.
            if isinstance(e, _Stop):
                raise
            msg = _describe(e).encode("utf8", "replace")[:4000]
            parts.append(_ERROR.pack(11 + len(msg), ord("E"), sid, field) + msg)
            flush()
            raise _Stop()
        if size >= _FLUSH or len(parts) >= _MAX_PARTS:
            flush()

    try:
        work(k, emit)
        flush()
        state[3 * k + 2] = _DONE
    except (_Stop, BrokenPipeError):
        state[3 * k + 2] = _STOPPED
    except BaseException:
        # Ctrl-C reaches every process; the writing process reports it.
        state[3 * k + 2] = _STOPPED
    finally:
        os.close(fd)


class _Stop(Exception):
    pass


def _describe(e):
    """TYPE: MESSAGE of an exception, even one whose str() fails."""
    name = type(e).__name__
    if isinstance(e, SystemExit):
        name += " (the dataset called sys.exit)"
    try:
        text = str(e)
    except BaseException as inner:
        text = f"(its message cannot be shown: str() raised {type(inner).__name__})"
    return f"{name}: {text}" if text else name


def _die_with_parent():
    """SIGKILL this worker when the writing process dies."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:
            os._exit(1)
    except (OSError, AttributeError):
        pass
