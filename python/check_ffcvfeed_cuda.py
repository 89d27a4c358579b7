"""End-to-end check of ffcvfeed's CUDA delivery, for a machine with a GPU.

Starts `ffcvfeed serve --device cuda:0` (a build with -tags cuda) on a small
beton and reads it with the ffcvfs package's Loader through CuPy and DLPack into torch:

  1. sequential order: every sample exactly once, with the beton's label at
     its place; tensors on the GPU that share the server's device buffers
     (no copy); device bytes equal to the host copies of the same run;
     pixels and labels equal, batch by batch, to `serve --device cpu` with
     the same seed;
  2. float16 NCHW, normalized, center crops, quasi-random order, 2 epochs:
     equal to the CPU path batch by batch, each sample once per epoch;
  3. throughput with the consumer idle (it only takes and releases
     batches), in images/s, next to the CPU path's, and the CPU path's
     batches copied to the GPU with .cuda() (pinned), as a loop without
     device delivery does.

Usage (scripts/device-check.sh runs it):

    python3 python/check_ffcvfeed_cuda.py --bin bin/ffcvfeed-cuda --data small.beton [--cpu-bin bin/ffcvfeed]

Needs numpy, torch with CUDA, and CuPy for the same CUDA major version.
Exits 0 when every check passes, 1 otherwise.
"""

import argparse
import collections
import os
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from ffcvfs import Loader  # noqa: E402

failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what, flush=True)
    if not ok:
        failures.append(what)
    return ok


# --- the beton's labels (see BETON-FORMAT.md) ---

# type_id → (size, alignment) of its member in a metadata record.
_MEMBERS = {0: (8, 8), 1: (8, 8), 2: (13, 1), 3: (16, 1), 4: (8, 8), 5: (16, 1), 6: (8, 8)}


def beton_labels(path, name="label"):
    """The int field `name` (else the first int field) of every sample, in id order."""
    with open(path, "rb") as f:
        version, nfields, _, nsamples, _ = struct.unpack("<HHIQQ", f.read(24))
        if version != 2:
            raise SystemExit(f"{path}: beton version {version}, want 2")
        fields = []
        for _ in range(nfields):
            d = f.read(1041)
            fields.append((d[0], d[1:17].rstrip(b"\0").decode("ascii", "replace")))
        off, align, members = 0, 1, []
        for tid, fname in fields:
            if tid not in _MEMBERS:
                raise SystemExit(f"{path}: field {fname} of type {tid}: cannot lay out its records")
            size, a = _MEMBERS[tid]
            off = (off + a - 1) // a * a
            members.append((tid, fname, off))
            off += size
            align = max(align, a)
        record = (off + align - 1) // align * align
        ints = [m for m in members if m[0] == 1]
        pick = [m for m in ints if m[1] == name] or ints[:1]
        if not pick:
            raise SystemExit(f"{path}: no int field for labels")
        table = np.frombuffer(f.read(record * nsamples), np.uint8).reshape(nsamples, record)
        return table[:, pick[0][2]:pick[0][2] + 8].copy().view("<i8").reshape(nsamples)


# --- servers ---

class Server:
    """A running `ffcvfeed serve`, its output in a file."""

    def __init__(self, binary, data, device, args, tmp):
        self.sock = os.path.join(tmp, f"feed-{device.replace(':', '')}-{time.monotonic_ns()}.sock")
        self.logpath = self.sock + ".log"
        self.log = open(self.logpath, "w+")
        cmd = [binary, "serve", "--data", data, "--socket", self.sock, "--device", device] + args
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None:
                raise SystemExit(f"{' '.join(cmd)} exited with {self.proc.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                self.proc.kill()
                raise SystemExit(f"{' '.join(cmd)}: no socket after 120 s:\n{self.output()}")
            time.sleep(0.02)

    def output(self):
        self.log.flush()
        with open(self.logpath) as f:
            return f.read()

    def finish(self, what):
        try:
            rc = self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        check(rc == 0, f"{what}: ffcvfeed serve exited with {rc}" + ("" if rc == 0 else ":\n" + self.output()))


# --- consumers ---

def read_cuda(sock, epochs, compare_host=False):
    """Reads every epoch through .torch() on the GPU; returns [(epoch, batch, images, labels)] on the host."""
    out = []
    with Loader(sock) as loader:
        check(loader.device is not None, f"the loader reads device buffers (cuda:{loader.device})")
        cuda = loader._cuda
        for _ in range(epochs):
            for images, labels in loader.torch():
                m = loader.current
                slot_ptr = cuda.ptrs[m["slot"]]
                if not (images.is_cuda and labels.is_cuda and
                        slot_ptr <= images.data_ptr() < slot_ptr + loader.slot_bytes and
                        slot_ptr <= labels.data_ptr() < slot_ptr + loader.slot_bytes):
                    check(False, f"batch {m['batch']}: tensors not on the server's device buffer of slot {m['slot']}")
                # Work on the consumer stream, then bring the result back.
                img = images.clone()
                img.add_(0)
                img_h, lab_h = img.cpu().numpy(), labels.cpu().numpy()
                if compare_host:
                    host = loader.host_batch()
                    if not (np.array_equal(host["image"], img_h) and np.array_equal(host["label"], lab_h)):
                        check(False, f"batch {m['batch']}: device bytes differ from the host copy of the same batch")
                out.append((m["epoch"], m["batch"], img_h, lab_h))
        check(loader.ended, "the consumer saw the end of the stream")
    return out


def read_cpu(sock, epochs):
    out = []
    with Loader(sock, device="cpu") as loader:
        for _ in range(epochs):
            for images, labels in loader:
                m = loader.current
                out.append((m["epoch"], m["batch"], images.copy(), labels.copy()))
    return out


def compare(name, cuda, cpu):
    check(len(cuda) == len(cpu), f"{name}: {len(cuda)} batches on the GPU, {len(cpu)} on the CPU path")
    bad = [(e, b) for (e, b, i, l), (e2, b2, i2, l2) in zip(cuda, cpu)
           if (e, b) != (e2, b2) or i.shape != i2.shape or not np.array_equal(i, i2) or not np.array_equal(l, l2)]
    check(not bad, f"{name}: pixels and labels equal to the CPU path's, batch by batch" +
          (f" (differ: {bad[:5]})" if bad else ""))


def idle_throughput(binary, data, device, args, epochs, tmp):
    srv = Server(binary, data, device, args + ["--epochs", str(epochs)], tmp)
    rates = []
    if device == "cpu":
        loader = Loader(srv.sock, device="cpu")
    else:
        loader = Loader(srv.sock)
    with loader:
        for _ in range(epochs):
            n, t = 0, time.perf_counter()
            it = loader.torch() if device != "cpu" else iter(loader)
            for _, labels in it:
                n += int(labels.shape[0])
            rates.append(n / (time.perf_counter() - t))
    srv.finish(f"throughput on {device}")
    return rates


def copy_throughput(binary, data, args, epochs, tmp):
    """The CPU path's batches copied to the GPU as a training loop without
    device delivery does: pinned, then .cuda(non_blocking=True)."""
    import torch
    srv = Server(binary, data, "cpu", args + ["--epochs", str(epochs)], tmp)
    rates = []
    with Loader(srv.sock, device="cpu") as loader:
        for _ in range(epochs):
            n, t = 0, time.perf_counter()
            for images, labels in loader:
                torch.from_numpy(images).pin_memory().cuda(non_blocking=True)
                torch.from_numpy(labels).cuda(non_blocking=True)
                n += int(labels.shape[0])
            torch.cuda.synchronize()
            rates.append(n / (time.perf_counter() - t))
    srv.finish("throughput on cpu, copied with .cuda()")
    return rates


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="ffcvfeed built with -tags cuda")
    ap.add_argument("--cpu-bin", help="ffcvfeed for the CPU runs (default: --bin)")
    ap.add_argument("--data", required=True, help="a small beton (a few thousand images at most)")
    ap.add_argument("--batch-size", type=int, help="default: 64 or near, not dividing the sample count")
    ap.add_argument("--resolution", type=int, default=96)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--bench-epochs", type=int, default=3)
    opts = ap.parse_args()
    cpu_bin = opts.cpu_bin or opts.bin

    import cupy
    import torch

    check(torch.cuda.is_available(), f"torch {torch.__version__} sees {torch.cuda.device_count()} GPU(s)")
    print(f"      cupy {cupy.__version__}, device 0: {torch.cuda.get_device_name(0)}", flush=True)

    labels = beton_labels(opts.data)
    n = len(labels)
    bsz = opts.batch_size or next((b for b in (64, 60, 56, 50, 48, 40, 32, 24) if b <= n and n % b), 64)
    nb = (n + bsz - 1) // bsz
    print(f"      {opts.data}: {n} samples; batch size {bsz} ({nb} batches, last of {n - (nb - 1) * bsz})", flush=True)

    with tempfile.TemporaryDirectory(prefix="ffcvfeed-gpu-check-") as tmp:
        common = ["--batch-size", str(bsz), "--resolution", str(opts.resolution), "--workers", str(opts.workers), "--seed", "7"]

        # 1. Sequential: every sample once, at its place, with its label.
        args = common + ["--order", "sequential", "--epochs", "1", "--slots", "4"]
        srv = Server(opts.bin, opts.data, "cuda:0", args, tmp)
        got = read_cuda(srv.sock, 1, compare_host=True)
        srv.finish("sequential, cuda:0")
        check(len(got) == nb and [b for _, b, _, _ in got] == list(range(nb)),
              f"sequential: batches 0..{nb - 1} in order (got {len(got)})")
        check([len(l) for _, _, _, l in got] == [bsz] * (nb - 1) + [n - (nb - 1) * bsz],
              "sequential: batch sizes, the last one partial")
        seq = np.concatenate([l for _, _, _, l in got]) if got else np.array([])
        check(seq.shape == labels.shape and np.array_equal(seq, labels),
              "sequential: every sample exactly once, with the beton's label at its place")
        check(all(i.dtype == np.uint8 and i.shape[1:] == (opts.resolution, opts.resolution, 3) and i.any()
                  for _, _, i, _ in got), "sequential: uint8 NHWC images, none all zero")
        srv = Server(cpu_bin, opts.data, "cpu", args, tmp)
        ref = read_cpu(srv.sock, 1)
        srv.finish("sequential, cpu")
        compare("sequential", got, ref)

        # 2. float16 NCHW, normalized, quasi-random, 2 epochs, 3 slots.
        args = common + ["--order", "quasi-random", "--epochs", "2", "--slots", "3", "--dtype", "float16",
                         "--layout", "nchw", "--normalize", "imagenet", "--crop", "center"]
        srv = Server(opts.bin, opts.data, "cuda:0", args, tmp)
        got = read_cuda(srv.sock, 2)
        srv.finish("float16, cuda:0")
        want = collections.Counter(labels.tolist())
        for e in range(2):
            ep = [l for ep_, _, _, l in got if ep_ == e]
            seen = collections.Counter(np.concatenate(ep).tolist()) if ep else collections.Counter()
            check(len(ep) == nb and seen == want, f"float16 epoch {e}: {len(ep)} batches, each sample once (label counts)")
        check(all(i.dtype == np.float16 and i.shape[1:] == (3, opts.resolution, opts.resolution) for _, _, i, _ in got),
              "float16: NCHW float16 images")
        srv = Server(cpu_bin, opts.data, "cpu", args, tmp)
        ref = read_cpu(srv.sock, 2)
        srv.finish("float16, cpu")
        compare("float16", got, ref)

        # 3. Throughput, consumer idle.
        args = common + ["--order", "quasi-random", "--slots", "4"]
        e = max(1, opts.bench_epochs)
        gpu = idle_throughput(opts.bin, opts.data, "cuda:0", args, e, tmp)
        cpu = idle_throughput(cpu_bin, opts.data, "cpu", args, e, tmp)
        copied = copy_throughput(cpu_bin, opts.data, args, e, tmp)
        for name, r in (("cuda:0", gpu), ("cpu", cpu), ("cpu+.cuda()", copied)):
            print(f"      throughput, consumer idle, {name}: " + ", ".join(f"epoch {i}: {x:.0f} img/s" for i, x in enumerate(r)) +
                  f"; best {max(r):.0f} img/s", flush=True)
        print(f"      cuda:0 / cpu (best epochs): {max(gpu) / max(cpu):.2f}; cuda:0 / cpu+.cuda(): {max(gpu) / max(copied):.2f}", flush=True)
        # Lines for scripts/device-check.sh's summary.
        print(f"gpu loader device=cuda:0 images/s={max(gpu):.0f}", flush=True)
        print(f"gpu loader device=cpu images/s={max(cpu):.0f}", flush=True)
        print(f"gpu loader device=cpu+.cuda() images/s={max(copied):.0f}", flush=True)

    if failures:
        print(f"\n{len(failures)} check(s) failed", flush=True)
        sys.exit(1)
    print("\nall checks passed", flush=True)


if __name__ == "__main__":
    main()
