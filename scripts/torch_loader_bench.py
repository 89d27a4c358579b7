#!/usr/bin/python3
"""Baseline for `scripts/bench.sh feed`: torchvision's ImageFolder and a
DataLoader doing what `ffcvfeed bench` does (decode, RandomResizedCrop,
RandomHorizontalFlip, uint8 HWC->CHW tensors, batches), timed per epoch.

    /usr/bin/python3 scripts/torch_loader_bench.py DIR [--epochs 1] [--workers 2]
        [--batch-size 256] [--resolution 160]

Prints one line per epoch (`epoch E: torchvision: ...`) when --epochs > 1, and
always a last line `torchvision: N images in S s: R images/s` (all epochs).
The time of an epoch runs from asking for its first batch (worker start-up
included, as in training) to receiving its last.
"""

import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dir", help="ImageFolder root")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--resolution", type=int, default=160)
    a = p.parse_args()
    if a.epochs < 1 or a.workers < 0 or a.batch_size < 1 or a.resolution < 1:
        p.error("--epochs, --batch-size and --resolution must be positive, --workers non-negative")

    import torch
    from torch.utils.data import DataLoader
    from torchvision import transforms
    from torchvision.datasets import ImageFolder

    torch.set_num_threads(1)  # the work is in the workers
    tf = transforms.Compose([
        transforms.RandomResizedCrop(a.resolution),
        transforms.RandomHorizontalFlip(),
        transforms.PILToTensor(),
    ])
    ds = ImageFolder(a.dir, transform=tf)
    if len(ds) == 0:
        sys.exit(f"torch_loader_bench: no images in {a.dir}")
    loader = DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.workers)

    total_n, total_s = 0, 0.0
    for e in range(a.epochs):
        n = 0
        start = time.perf_counter()
        for images, labels in loader:
            if images.dtype != torch.uint8 or tuple(images.shape[1:]) != (3, a.resolution, a.resolution):
                sys.exit(f"torch_loader_bench: unexpected batch {images.dtype} {tuple(images.shape)}")
            n += images.shape[0]
        s = time.perf_counter() - start
        if n != len(ds):
            sys.exit(f"torch_loader_bench: epoch {e}: {n} images, the dataset holds {len(ds)}")
        total_n, total_s = total_n + n, total_s + s
        if a.epochs > 1:
            print(f"epoch {e}: torchvision: {n} images in {s:.3f} s: {n / s:.1f} images/s", flush=True)
    print(f"torchvision: {total_n} images in {total_s:.3f} s: {total_n / total_s:.1f} images/s", flush=True)


if __name__ == "__main__":
    main()
