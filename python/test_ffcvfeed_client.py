"""Tests of ffcvfeed.Loader against an in-process fake server.

Run: PYTHONPATH=python /usr/bin/python3 -m unittest python/test_ffcvfeed_client.py
"""

import json
import mmap
import os
import socket
import tempfile
import threading
import unittest

import numpy as np

from ffcvfs import FeedError, Loader
from ffcvfs.feed import _socket_parent


class FakeServer:
    """Sends the given lines to the first client, records what it sends back."""

    def __init__(self, lines):
        self.dir = tempfile.TemporaryDirectory(dir=_socket_parent())
        self.path = os.path.join(self.dir.name, "feed.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.sock.listen(1)
        self.lines = lines
        self.received = b""
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.sock.accept()
        with conn:
            for line in self.lines:
                conn.sendall(line if isinstance(line, bytes) else (json.dumps(line) + "\n").encode())
            while True:
                b = conn.recv(4096)
                if not b:
                    return
                self.received += b

    def close(self):
        self.sock.close()
        self.thread.join(5)
        self.dir.cleanup()


class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.shm = tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="ffcvfeed-pytest-")
        self.shm.truncate(2 * 128)
        mm = mmap.mmap(self.shm.fileno(), 256)
        labels = np.ndarray((4,), np.int64, mm, 64)
        labels[:] = [10, 11, 12, 13]
        np.ndarray((4,), np.int64, mm, 128 + 64)[:] = [20, 21, 22, 23]
        del labels
        mm.close()
        self.hello = {"hello": 1, "shm": self.shm.name, "slots": 2, "slot_bytes": 128,
                      "fields": [{"name": "images", "dtype": "uint8", "shape": [4, 4, 4, 1], "offset": 0, "bytes": 64},
                                 {"name": "labels", "dtype": "int64", "shape": [4], "offset": 64, "bytes": 32}],
                      "batches_per_epoch": 2, "epochs": 1}

    def tearDown(self):
        self.shm.close()

    def test_socket_path_too_long(self):
        # A path past a Unix socket's 107 bytes: FeedError naming it and what
        # to do, not OSError("AF_UNIX path too long").
        long = "/tmp/" + "s" * 120 + ".sock"
        with self.assertRaisesRegex(FeedError, r"the socket /tmp/s+\.sock is 130 bytes long, more than the 107 .*"
                                               r"set TMPDIR to a shorter folder"):
            Loader(long, connect_timeout=0)

    def test_missing_socket(self):
        # A folder that does not exist: at once, whatever the timeout, with the fix.
        with self.assertRaisesRegex(FeedError, r"no ffcvfeed server at /nonexistent/feed.sock: the folder /nonexistent "
                                               r"does not exist.*ffcvfeed serve --data DATA --socket /nonexistent/feed.sock"):
            Loader("/nonexistent/feed.sock", connect_timeout=3600)
        with tempfile.TemporaryDirectory(dir=_socket_parent()) as d:
            path = os.path.join(d, "feed.sock")
            with self.assertRaisesRegex(FeedError, r"no ffcvfeed server at .*feed.sock: no socket there yet; start one "
                                                   r"with: ffcvfeed serve"):
                Loader(path, connect_timeout=0)
            # The wait is announced when it starts, not only when it ends.
            with self.assertLogs("ffcvfs", "WARNING") as logs:
                with self.assertRaisesRegex(FeedError, r"no socket there yet \(waited 0.05 s\); start one with"):
                    Loader(path, connect_timeout=0.05)
            self.assertRegex(logs.output[0], r"waiting up to 0.05 s for an ffcvfeed server at .*feed.sock \(no socket "
                                             r"there yet\): start one with ffcvfeed serve --socket")
            # A socket file nobody listens on: a server that ended.
            stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            stale.bind(path)
            stale.close()
            with self.assertRaisesRegex(FeedError, "its socket is there, but no server listens on it"):
                Loader(path, connect_timeout=0)

    def test_load_state_dict_hostile(self):
        # States with infinities, fractions, huge lists and
        # absurd numbers are a ValueError with a short sentence, never an
        # OverflowError or a fraction taken for a batch.
        good = {"epoch": 0, "batch": 0, "batches_per_epoch": 2, "epochs": 1, "world_size": 1, "batch_size": 4,
                "position": 0, "segments": []}
        hostile = [
            dict(good, epoch=float("inf")), dict(good, batch=0.9), dict(good, batch=float("nan")),
            dict(good, epoch="1"), dict(good, batch=True), dict(good, world_size=float("inf")),
            dict(good, world_size=1 << 40), dict(good, position=-1), dict(good, position=1 << 64),
            dict(good, segments=[[1, 0]] * 10**6), dict(good, segments=[[1 << 40, 0]]),
            dict(good, segments=[[1 << 20, 0]] * 5), dict(good, segments=[["x" * 10**6, 0]]),
            dict(good, segments="x" * 10**6), dict(good, batches_per_epoch=float("inf")),
            {"epoch": 0}, "not a dict", None,
        ]
        srv = FakeServer([self.hello, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                for st in hostile:
                    with self.assertRaises(ValueError) as cm:
                        loader.load_state_dict(st)
                    self.assertLess(len(str(cm.exception)), 300, str(cm.exception)[:300])
                with self.assertRaises(ValueError):
                    loader.resume_args(world_size=float("inf"))
                loader.load_state_dict(good)  # and a good one still loads
        finally:
            srv.close()

    def test_torch_to_a_cuda_device(self):
        import torch
        srv = FakeServer([self.hello, {"slot": 0, "epoch": 0, "batch": 1, "size": 2}, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                if torch.cuda.is_available():
                    for images, labels in loader.torch("cuda"):
                        self.assertEqual(labels.device.type, "cuda")
                else:
                    # Never CPU tensors where a GPU was asked for.
                    with self.assertRaisesRegex(FeedError, r"torch\('cuda'\): torch sees no CUDA device"):
                        next(loader.torch("cuda"))
                with self.assertRaisesRegex(FeedError, "the batches go to the CPU or a CUDA device, not meta"):
                    next(loader.torch("meta"))
        finally:
            srv.close()

    def test_waits_for_the_server(self):
        # The server comes up after the loader started connecting, as when a
        # job starts both at once.
        box = {}
        tmp = tempfile.TemporaryDirectory(dir=_socket_parent())
        path = os.path.join(tmp.name, "feed.sock")

        def start():
            srv = FakeServer([self.hello, {"end": True}])
            os.rename(srv.path, path)
            box["srv"] = srv
        t = threading.Timer(0.2, start)
        t.start()
        try:
            with Loader(path, connect_timeout=60) as loader:
                self.assertEqual(len(loader), 2)
        finally:
            t.join()
            if "srv" in box:
                box["srv"].close()
            tmp.cleanup()

    def test_malformed_hello(self):
        for bad in [b"garbage\n", {"hello": 1}, dict(self.hello, fields="x"), dict(self.hello, hello=2), b"[1]\n", b""]:
            srv = FakeServer([bad])
            try:
                with self.assertRaises(FeedError):
                    Loader(srv.path, hello_timeout=0.2)
            finally:
                srv.close()

    def test_batches_and_releases(self):
        srv = FakeServer([self.hello, {"slot": 1, "epoch": 0, "batch": 0, "size": 4},
                          {"slot": 0, "epoch": 0, "batch": 1, "size": 3}, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                self.assertEqual(len(loader), 2)
                got = []
                for images, labels in loader:
                    self.assertTrue(np.shares_memory(labels, loader.buffer))
                    self.assertEqual(images.shape[1:], (4, 4, 1))
                    got.append(labels.tolist())
                self.assertEqual(got, [[20, 21, 22, 23], [10, 11, 12]])
                self.assertTrue(loader.ended)
                with self.assertRaisesRegex(FeedError, "--epochs"):
                    list(loader)  # past the end of the stream: an error, not an empty epoch
        finally:
            srv.close()
        self.assertEqual(srv.received, b'{"release":1}\n{"release":0}\n')

    def test_torch_zero_copy(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch not installed")
        srv = FakeServer([self.hello, {"slot": 0, "epoch": 0, "batch": 1, "size": 2}, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                for images, labels in loader.torch():
                    self.assertEqual(labels.tolist(), [10, 11])
                    self.assertEqual(labels.data_ptr(), loader.buffer.ctypes.data + 64)
        finally:
            srv.close()

    def test_torch_channels_last_view(self):
        try:
            import torch
        except ImportError:
            self.skipTest("torch not installed")
        hello = dict(self.hello, fields=[{"name": "images", "dtype": "uint8", "shape": [2, 4, 4, 3], "offset": 0, "bytes": 96},
                                         {"name": "labels", "dtype": "int64", "shape": [2], "offset": 96, "bytes": 16}], slot_bytes=128)
        srv = FakeServer([hello, {"slot": 0, "epoch": 0, "batch": 1, "size": 2}, {"end": True}])
        try:
            with Loader(srv.path) as loader:
                for images, labels in loader.torch(channels_last=True):
                    self.assertEqual(tuple(images.shape), (2, 3, 4, 4))
                    self.assertTrue(images.is_contiguous(memory_format=torch.channels_last))
                    self.assertEqual(images.data_ptr(), loader.buffer.ctypes.data)  # a view, no copy
                    self.assertTrue(torch.equal(images, torch.from_numpy(loader.host_batch()["images"]).permute(0, 3, 1, 2)))
                    self.assertEqual(tuple(labels.shape), (2,))
        finally:
            srv.close()


if __name__ == "__main__":
    unittest.main()
