#!/usr/bin/python3
"""Writes an ImageFolder tree into a beton with FFCV 1.0's own
DatasetWriter, as FFCV's ImageNet example does (RGBImageField in 'jpg'
mode: every image decoded and encoded again by OpenCV at --jpeg-quality,
no restart markers; IntField labels): the beton people have, for
`scripts/bench.sh feed`'s row of an FFCV-written beton converted by
`ffcvfs write --from-beton`.

    /usr/bin/python3 scripts/ffcv_write_imagefolder.py --ffcv DIR FOLDER OUT.beton
        [--workers 2] [--jpeg-quality 90] [--max-resolution N]

DIR holds FFCV's source with its extension built in place (bench.sh's
ffcv_src builds it from Debian's packages).
"""

import argparse
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("folder")
    p.add_argument("out")
    p.add_argument("--ffcv", required=True, help="FFCV source folder with the extension built in place")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--jpeg-quality", type=int, default=90)
    p.add_argument("--max-resolution", type=int, default=None)
    a = p.parse_args()
    if a.workers < 1 or not 1 <= a.jpeg_quality <= 100 or a.max_resolution is not None and a.max_resolution < 1:
        p.error("--workers must be positive, --jpeg-quality 1 to 100, --max-resolution positive")
    sys.path.insert(0, a.ffcv)

    from ffcv.fields import IntField, RGBImageField
    from ffcv.writer import DatasetWriter
    from torchvision.datasets import ImageFolder

    data = ImageFolder(a.folder)  # (PIL image, label), as FFCV's example
    fields = {"image": RGBImageField(write_mode="jpg", max_resolution=a.max_resolution, jpeg_quality=a.jpeg_quality),
              "label": IntField()}
    DatasetWriter(a.out, fields, num_workers=a.workers).from_indexed_dataset(data)
    print(f"{a.out}: {len(data)} images written by FFCV's DatasetWriter")


if __name__ == "__main__":
    main()
