#!/usr/bin/python3
"""Baseline for `scripts/bench.sh feed`: FFCV's own Loader doing what
`ffcvfeed bench` does (JPEG decode with RandomResizedCrop, horizontal flip,
uint8 NHWC batches viewed as NCHW torch tensors, integer labels) over the
same beton, timed per epoch.

    /usr/bin/python3 scripts/ffcv_loader_bench.py BETON --ffcv DIR [--epochs 3]
        [--workers 2] [--batch-size 256] [--resolution 160]

DIR holds FFCV's source with its extension built in place (`python3 setup.py
build_ext --inplace`; bench.sh builds it from Debian's packages). FFCV reads
the beton through the OS page cache (os_cache=True) in random order, its
fastest setting when the data fits in memory. Prints one line per epoch
(`epoch E: ffcv: N images in S s: R images/s`); the first epoch includes
Numba compiling the pipeline.
"""

import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("beton")
    p.add_argument("--ffcv", required=True, help="FFCV source folder with the extension built in place")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--resolution", type=int, default=160)
    p.add_argument("--pipeline", choices=("imagenet", "cifar"), default="imagenet",
                   help="imagenet: the pipeline above; cifar: FFCV's CIFAR-10 example's training pipeline "
                        "(SimpleRGBImageDecoder, RandomHorizontalFlip, RandomTranslate(2, mean), Cutout(4, mean), "
                        "up to ToTorchImage: no GPU here), drop_last as the example")
    a = p.parse_args()
    if a.epochs < 1 or a.workers < 1 or a.batch_size < 1 or a.resolution < 1:
        p.error("--epochs, --workers, --batch-size and --resolution must be positive")
    sys.path.insert(0, a.ffcv)

    import torch
    from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder, SimpleRGBImageDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.transforms import Cutout, RandomHorizontalFlip, RandomTranslate, Squeeze, ToTensor, ToTorchImage

    torch.set_num_threads(1)
    if a.pipeline == "cifar":
        mean = (125, 122, 113)  # tuple(map(int, CIFAR_MEAN)) of the example
        image = [SimpleRGBImageDecoder(), RandomHorizontalFlip(), RandomTranslate(padding=2, fill=mean),
                 Cutout(4, mean), ToTensor(), ToTorchImage()]
        label = [IntDecoder(), ToTensor(), Squeeze()]
    else:
        image = [RandomResizedCropRGBImageDecoder((a.resolution, a.resolution)),
                 RandomHorizontalFlip(), ToTensor(), ToTorchImage()]
        label = [IntDecoder(), ToTensor()]
    loader = Loader(
        a.beton,
        batch_size=a.batch_size,
        num_workers=a.workers,
        order=OrderOption.RANDOM,
        os_cache=True,
        drop_last=a.pipeline == "cifar",
        pipelines={"image": image, "label": label},
    )
    for e in range(a.epochs):
        n, start = 0, time.perf_counter()
        for images, labels in loader:
            n += images.shape[0]
        el = time.perf_counter() - start
        print(f"epoch {e}: ffcv: {n} images in {el:.2f} s: {n / el:.0f} images/s", flush=True)


if __name__ == "__main__":
    main()
