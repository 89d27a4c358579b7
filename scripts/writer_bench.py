"""FFCV's DatasetWriter against ffcvfs.DatasetWriter, alternating, on the
same cores and workers (scripts/bench.sh writer runs it):

    /usr/bin/python3 scripts/writer_bench.py --ffcv FFCV_SRC PHOTO_FOLDER OUT_DIR [--runs R] [--cifar N]

(a) CIFAR-like: N (50,000) 32x32 uint8 arrays cut from the photos, and int
    labels, written raw (FFCV's CIFAR example: RGBImageField() and
    IntField()).
(b) the photos as the dataset returns them: encoded JPEG bytes read from
    their files, write_mode jpg, max_resolution 1024, which they fit
    (ffcvfs keeps them verbatim); FFCV takes no bytes, so its dataset
    decodes them (PIL) as in (c).
(c) the photos as PIL images (the dataset decodes them), write_mode jpg,
    max_resolution 1024 (encoded, not resized) and 512 (resized and
    encoded), against merely iterating the dataset with the same number of
    worker processes (each fetches every sample of its share and drops it).

Each row is the median of R runs of the writer call alone (imports and
dataset set-up before), in samples/s; memory is the peak of the summed
PSS of the writer's processes (its workers and ffcvfs write; the calling
process, which holds the dataset, aside), sampled every 20 ms from /proc.
"""
import argparse
import glob
import io
import multiprocessing
import os
import statistics
import sys
import threading
import time

import numpy as np
from PIL import Image

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True)
ap.add_argument("photos")
ap.add_argument("out")
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--cifar", type=int, default=50000)
ap.add_argument("--workers", type=int, default=2)
args = ap.parse_args()
sys.path.insert(0, args.ffcv)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import ffcv.fields  # noqa: E402
import ffcv.writer  # noqa: E402
import ffcvfs.fields  # noqa: E402
import ffcvfs.writer  # noqa: E402

paths = sorted(glob.glob(os.path.join(args.photos, "*", "*.jpg")))
if not paths:
    sys.exit(f"no JPEGs in {args.photos}")


class Cifar:
    def __init__(self, n):
        base = [np.asarray(Image.open(p).convert("RGB").resize((32, 32), Image.BOX)) for p in paths[:200]]
        self.images = [base[i % len(base)] for i in range(n)]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        return self.images[i], i % 10


class JPEGBytes:
    def __len__(self):
        return len(paths)

    def __getitem__(self, i):
        with open(paths[i], "rb") as f:
            return f.read(), i % 10


class PILImages:
    def __len__(self):
        return len(paths)

    def __getitem__(self, i):
        return Image.open(paths[i]).convert("RGB"), i % 10


def descendants_pss(pid):
    """PSS in bytes of pid's descendants (the writers' worker processes
    and ffcvfs write; shared pages counted in proportion)."""
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, list(children.get(pid, []))
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
        todo += children.get(p, [])
    return total


def timed(fn):
    peak = [0]
    done = threading.Event()

    def watch():
        while not done.wait(0.02):
            peak[0] = max(peak[0], descendants_pss(os.getpid()))

    w = threading.Thread(target=watch, daemon=True)
    w.start()
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    done.set()
    w.join()
    return dt, peak[0]


def iterate(ds, workers):
    """Every sample of ds fetched once by `workers` processes, dropped."""
    def run(k):
        for i in range(k, len(ds), workers):
            ds[i]
    ps = [multiprocessing.get_context("fork").Process(target=run, args=(k,)) for k in range(workers)]
    for p in ps:
        p.start()
    for p in ps:
        p.join()


def out(name):
    return os.path.join(args.out, name)


cases = []
cifar = Cifar(args.cifar)
cases.append(("(a) CIFAR-like, raw", len(cifar), [
    ("FFCV DatasetWriter", lambda: ffcv.writer.DatasetWriter(out("a-ffcv.beton"), {"image": ffcv.fields.RGBImageField(), "label": ffcv.fields.IntField()}, num_workers=args.workers).from_indexed_dataset(cifar)),
    ("ffcvfs DatasetWriter", lambda: ffcvfs.writer.DatasetWriter(out("a-ffcvfs.beton"), {"image": ffcvfs.fields.RGBImageField(), "label": ffcvfs.fields.IntField()}, num_workers=args.workers).from_indexed_dataset(cifar)),
]))
jpg = {"write_mode": "jpg", "max_resolution": 1024}
cases.append(("(b) photos as JPEG bytes (FFCV: as PIL images)", len(paths), [
    ("FFCV DatasetWriter", lambda: ffcv.writer.DatasetWriter(out("b-ffcv.beton"), {"image": ffcv.fields.RGBImageField(**jpg), "label": ffcv.fields.IntField()}, num_workers=args.workers).from_indexed_dataset(PILImages())),
    ("ffcvfs DatasetWriter", lambda: ffcvfs.writer.DatasetWriter(out("b-ffcvfs.beton"), {"image": ffcvfs.fields.RGBImageField(**jpg), "label": ffcvfs.fields.IntField()}, num_workers=args.workers).from_indexed_dataset(JPEGBytes())),
]))
for res in (1024, 512):
    kw = {"write_mode": "jpg", "max_resolution": res}
    cases.append((f"(c) photos as PIL images, max_resolution {res}", len(paths), [
        ("iterating the dataset", lambda: iterate(PILImages(), args.workers)),
        ("FFCV DatasetWriter", lambda kw=kw: ffcv.writer.DatasetWriter(out("c-ffcv.beton"), {"image": ffcv.fields.RGBImageField(**kw), "label": ffcv.fields.IntField()}, num_workers=args.workers).from_indexed_dataset(PILImages())),
        ("ffcvfs DatasetWriter", lambda kw=kw: ffcvfs.writer.DatasetWriter(out("c-ffcvfs.beton"), {"image": ffcvfs.fields.RGBImageField(**kw), "label": ffcvfs.fields.IntField()}, num_workers=args.workers).from_indexed_dataset(PILImages())),
    ]))

devnull = os.open(os.devnull, os.O_WRONLY)
print(f"writers, {args.workers} workers each, {os.cpu_count()} cores, median of {args.runs} runs, alternating")
print(f"{'case':<50} {'writer':<24} {'samples/s':>10} {'ratio':>7} {'peak PSS':>9}")
for title, n, rows in cases:
    times = {name: [] for name, _ in rows}
    rss = {name: 0 for name, _ in rows}
    for _ in range(args.runs):
        for name, fn in rows:
            # The progress bars (tqdm's, ffcvfs write's) to /dev/null.
            saved = [os.dup(1), os.dup(2)]
            sys.stdout.flush()
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            try:
                dt, peak = timed(fn)
            finally:
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
                os.close(saved[0])
                os.close(saved[1])
            times[name].append(dt)
            rss[name] = max(rss[name], peak)
    base = statistics.median(times[rows[0][0]])
    for name, _ in rows:
        med = statistics.median(times[name])
        print(f"{title:<50} {name:<24} {n / med:>10.0f} {base / med:>7.2f} {rss[name] / 2**20:>6.0f} MiB")
        title = ""
