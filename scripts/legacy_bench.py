#!/usr/bin/python3
"""Legacy loader over ffcvfs mounts vs a plain folder, for
`scripts/bench.sh legacy`: torchvision's ImageFolder with RandomResizedCrop,
RandomHorizontalFlip and PILToTensor, and a DataLoader, unchanged, reading
one root per epoch, the roots taken in turn, round after round.

    /usr/bin/python3 scripts/legacy_bench.py --plain DIR
        --mount NAME=MNT:PID [--mount ...] [--rounds 5] [--workers 2]
        [--batch-size 64] [--resolution 224] [--no-isatty]

Each round reads the plain folder with shuffle=True, then each mount with
shuffle=True and with QuasiRandomSampler (the ffcvfs package), after
one round of warm-up that is not counted. For a mount epoch it also records
the mount process's CPU time (utime + stime from /proc/PID/stat) and the
FUSE requests the mount served (stats.json's fuse.requests), per file read.

With --no-isatty it also reads the plain folder and the first mount with a
loader that opens each image with open(path, "rb", buffering=4096): the
same buffer as open()'s default here, but CPython then asks no isatty(), the
TCGETS ioctl that the kernel sends to a FUSE mount as an IOCTL request at
every open. Those rows' ratios are to the plain folder read the same way:
what the mount costs without that round trip.

Prints one line per epoch, `epoch WHAT: ...`, then one line per WHAT with
the medians: `median WHAT: R images/s ratio X cpu_us_per_file C req_per_file
{...}`.
"""

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fuse_requests(mnt):
    with open(os.path.join(mnt, ".ffcvfs", "stats.json")) as f:
        return json.load(f)["fuse"]["requests"]


def open_no_isatty(path):
    """torchvision's pil_loader, with the buffer size given, so that open()
    does not ask isatty()."""
    from PIL import Image
    with open(path, "rb", buffering=4096) as f:
        img = Image.open(f)
        return img.convert("RGB")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--plain", required=True, help="the plain ImageFolder root (baseline)")
    p.add_argument("--mount", action="append", default=[], metavar="NAME=MNT:PID",
                   help="a mount to compare, and the pid of its ffcvfs process")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--resolution", type=int, default=224)
    p.add_argument("--no-isatty", action="store_true",
                   help="also read the plain folder and the first mount without isatty() at open")
    a = p.parse_args()

    import torch
    from torch.utils.data import DataLoader
    from torchvision import transforms
    from torchvision.datasets import ImageFolder
    from ffcvfs import QuasiRandomSampler

    torch.set_num_threads(1)  # the work is in the workers
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.resolution),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ])

    # (what, dataset, sampler or None, mount root or None, mount pid)
    runs = []
    base = {}  # what -> the what of its baseline
    plain_what = "plain folder, shuffle=True"
    plain = ImageFolder(a.plain, transform=tf)
    runs.append((plain_what, plain, None, None, None))
    if a.no_isatty:
        runs.append(("plain folder, shuffle=True, no isatty",
                     ImageFolder(a.plain, transform=tf, loader=open_no_isatty), None, None, None))
    for i, spec in enumerate(a.mount):
        name, _, rest = spec.partition("=")
        mnt, _, pid = rest.rpartition(":")
        ds = ImageFolder(mnt, transform=tf)
        if len(ds) != len(plain):
            sys.exit(f"legacy_bench: {mnt} has {len(ds)} images, {a.plain} has {len(plain)}")
        runs.append((f"mount {name}, shuffle=True", ds, None, mnt, int(pid)))
        runs.append((f"mount {name}, QuasiRandomSampler", ds, QuasiRandomSampler(mnt, seed=0), mnt, int(pid)))
        if a.no_isatty and i == 0:
            what = f"mount {name}, shuffle=True, no isatty"
            base[what] = "plain folder, shuffle=True, no isatty"
            runs.append((what, ImageFolder(mnt, transform=tf, loader=open_no_isatty), None, mnt, int(pid)))

    results = {what: [] for what, *_ in runs}
    epoch = 0
    for rnd in range(a.rounds + 1):
        for what, ds, sampler, mnt, pid in runs:
            if sampler is not None:
                sampler.set_epoch(epoch)
            loader = DataLoader(ds, batch_size=a.batch_size, shuffle=sampler is None, sampler=sampler,
                                num_workers=a.workers)
            if mnt:
                req0, cpu0 = fuse_requests(mnt), cpu_seconds(pid)
            n = 0
            start = time.perf_counter()
            for images, _ in loader:
                n += images.shape[0]
            secs = time.perf_counter() - start
            if n != len(ds):
                sys.exit(f"legacy_bench: {what}: {n} images in an epoch of {len(ds)}")
            line = f"epoch {what}: round {rnd}: {n} images in {secs:.2f} s: {n / secs:.1f} images/s"
            rec = {"rate": n / secs}
            if mnt:
                cpu = cpu_seconds(pid) - cpu0
                req1 = fuse_requests(mnt)
                per = {k: (req1.get(k, 0) - req0.get(k, 0)) / n for k in sorted(req1)}
                per = {k: round(v, 2) for k, v in per.items() if v}
                rec.update(cpu_us=1e6 * cpu / n, req=per, total=sum(per.values()))
                line += f" cpu_us_per_file {1e6 * cpu / n:.1f} req_per_file {json.dumps(per)}"
            print(line + (" (warm-up)" if rnd == 0 else ""), flush=True)
            if rnd > 0:
                results[what].append(rec)
        epoch += 1

    medians = {what: statistics.median(r["rate"] for r in results[what]) for what, *_ in runs}
    for what, *_ in runs:
        rs = results[what]
        rate = medians[what]
        line = f"median {what}: {rate:.1f} images/s ratio {rate / medians[base.get(what, plain_what)]:.3f}"
        if "cpu_us" in rs[0]:
            keys = sorted({k for r in rs for k in r["req"]})
            req = {k: round(statistics.median(r["req"].get(k, 0) for r in rs), 2) for k in keys}
            line += (f" cpu_us_per_file {statistics.median(r['cpu_us'] for r in rs):.1f}"
                     f" req_per_file {statistics.median(r['total'] for r in rs):.2f} {json.dumps(req)}")
        print(line, flush=True)


if __name__ == "__main__":
    main()
