"""Writes testdata/beton: four betons written by FFCV 1.0's own DatasetWriter
(gzipped) and, for each, a manifest of what FFCV's Reader finds in it, which
the format, mount and decode tests compare against.

    /usr/bin/python3 scripts/make_reference_betons.py --ffcv FFCV_SRC \\
        testdata/imagefolder-small testdata/beton

FFCV_SRC is a checkout of libffcv/ffcv with its extension built in place
(scripts/bench.sh's ffcv_src builds one from Debian's packages). One writer
worker and seeded draws: the same photos and FFCV give the same files.

- imagefolder-jpg.beton: the ImageFolder tree in ImageFolder order; image
  (RGBImageField, JPEG, longest side <= 320, quality 90) and label (IntField).
- imagefolder-mixed.beton: the same, longest side <= 96, each image JPEG or
  raw at random (write_mode="proportion", compress_probability 0.5).
- label-first-two-images.beton: every third photo, 60 in all; label first,
  then image (JPEG, <= 200) and thumb (raw, 40x30): field order and two
  image fields.
- all-fields.beton: 64 synthetic samples with every built-in field type:
  image (raw), label (int), weight (float), features (ndarray float32 3x4),
  blob (bytes), meta (JSON).

A manifest holds the header, each field's type id and handler, the metadata
record's size and field offsets, the allocation table's length, and for
each sample every field's value: numbers as they are; images, bytes and
JSON as pointer, size and SHA-256 of the stored bytes (JSON decoded too);
ndarrays as pointer, dtype, shape and values.
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import sys
import tempfile

import numpy as np
from PIL import Image

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True, help="a checkout of libffcv/ffcv with its extension built in place")
ap.add_argument("photos", help="the ImageFolder tree (testdata/imagefolder-small)")
ap.add_argument("out", help="the folder to write NAME.beton.gz and NAME.beton.manifest.json into")
args = ap.parse_args()
sys.path.insert(0, args.ffcv)

from ffcv.fields import (BytesField, FloatField, IntField, JSONField,  # noqa: E402
                         NDArrayField, RGBImageField)
from ffcv.reader import Reader  # noqa: E402
from ffcv.writer import DatasetWriter  # noqa: E402
from torchvision.datasets import ImageFolder  # noqa: E402

PAGE = 2 << 20
tree = ImageFolder(args.photos)


class Every:
    """Every step-th sample of a dataset, as (fields...) tuples."""

    def __init__(self, step, count, make):
        self.ids = list(range(0, len(tree), step))[:count]
        self.make = make

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return self.make(*tree[self.ids[int(i)]])


class AllFields:
    """Synthetic samples of every field type: sample i is 32 pixels wide and
    24 + i % 5 high, has label i % 7, weight i / 3, (1 + 37 i) % 300 bytes
    of blob and i % 3 tags; its pixels, features and blob bytes come from a
    generator seeded with i."""

    def __len__(self):
        return 64

    def __getitem__(self, i):
        i = int(i)
        r = np.random.default_rng(i)
        image = r.integers(0, 256, (24 + i % 5, 32, 3), dtype=np.uint8)
        blob = r.integers(0, 256, (1 + 37 * i) % 300, dtype=np.uint8)
        meta = {"id": i, "name": f"sample-{i}", "tags": ["a"] * (i % 3)}
        return image, i % 7, i / 3, r.standard_normal((3, 4)).astype(np.float32), blob, meta


def thumb_and_image(img, label):
    return label, img, np.asarray(img.convert("RGB").resize((40, 30), Image.BICUBIC))


betons = {
    "imagefolder-jpg": (Every(1, 200, lambda img, label: (img, label)),
                        {"image": RGBImageField(write_mode="jpg", max_resolution=320, jpeg_quality=90),
                         "label": IntField()}),
    "imagefolder-mixed": (Every(1, 200, lambda img, label: (img, label)),
                          {"image": RGBImageField(write_mode="proportion", max_resolution=96, jpeg_quality=90,
                                                  compress_probability=0.5),
                           "label": IntField()}),
    "label-first-two-images": (Every(3, 60, thumb_and_image),
                               {"label": IntField(),
                                "image": RGBImageField(write_mode="jpg", max_resolution=200, jpeg_quality=90),
                                "thumb": RGBImageField(write_mode="raw")}),
    "all-fields": (AllFields(),
                   {"image": RGBImageField(write_mode="raw"), "label": IntField(), "weight": FloatField(),
                    "features": NDArrayField(np.dtype("float32"), (3, 4)), "blob": BytesField(),
                    "meta": JSONField()}),
}


def sha(b):
    return hashlib.sha256(b).hexdigest()


def manifest(path):
    """What FFCV's Reader finds in the beton at path."""
    r = Reader(path)
    data = open(path, "rb").read()
    names = r.field_names
    m = {
        "num_samples": int(r.num_samples),
        "page_size": int(r.page_size),
        "fields": {n: {"type_id": int(d["type_id"]), "handler": type(r.handlers[n]).__name__}
                   for n, d in zip(names, r.field_descriptors)},
        "header": {"version": int(r.header["version"]), "num_fields": int(r.num_fields),
                   "alloc_table_ptr": int(r.header["alloc_table_ptr"])},
        "metadata_itemsize": int(r.metadata_type.itemsize),
        "metadata_offsets": [int(r.metadata_type.fields[k][1]) for k in r.metadata_type.names],
        "alloc_entries": int(len(r.alloc_table)),
        "samples": [],
    }
    sizes = {int(a["ptr"]): int(a["size"]) for a in r.alloc_table}  # an image's size is its allocation's
    for i in range(int(r.num_samples)):
        s = {}
        for j, n in enumerate(names):
            v = r.metadata[i][j]
            kind = type(r.handlers[n]).__name__
            if kind == "RGBImageField":
                ptr = int(v["data_ptr"])
                size = sizes[ptr]
                s[n] = {"mode": "jpg" if int(v["mode"]) == 0 else "raw", "width": int(v["width"]),
                        "height": int(v["height"]), "data_ptr": ptr, "size": size, "sha256": sha(data[ptr:ptr + size])}
            elif kind == "IntField":
                s[n] = int(v)
            elif kind == "FloatField":
                s[n] = float(v)
            elif kind == "NDArrayField":
                h = r.handlers[n]
                ptr = int(v)
                count = int(np.prod(h.shape))
                values = np.frombuffer(data, dtype=h.dtype, count=count, offset=ptr)
                s[n] = {"ptr": ptr, "dtype": str(h.dtype), "shape": [int(d) for d in h.shape], "values": values.tolist()}
            elif kind == "BytesField":
                ptr, size = int(v["ptr"]), int(v["size"])
                stored = data[ptr:ptr + size]
                s[n] = {"ptr": ptr, "size": size, "sha256": sha(stored)}
                if r.field_descriptors[j]["type_id"] == 5:  # JSONField
                    s[n]["json"] = json.loads(stored.split(b"\0")[0])
            else:
                raise SystemExit(f"{path}: field {n}: no manifest form for {kind}")
        m["samples"].append(s)
    return m


os.makedirs(args.out, exist_ok=True)
tmp = tempfile.mkdtemp()
try:
    for name, (dataset, fields) in betons.items():
        np.random.seed(0)  # the proportion mode's draws
        path = os.path.join(tmp, name + ".beton")
        DatasetWriter(path, fields, page_size=PAGE, num_workers=1).from_indexed_dataset(dataset)
        with open(os.path.join(args.out, name + ".beton.manifest.json"), "w") as f:
            json.dump(manifest(path), f)
        with open(path, "rb") as src, open(os.path.join(args.out, name + ".beton.gz"), "wb") as raw:
            # No name or time in the gzip header: the same beton, the same bytes.
            with gzip.GzipFile(filename="", mode="wb", compresslevel=9, fileobj=raw, mtime=0) as dst:
                shutil.copyfileobj(src, dst)
        print(f"{name}.beton: {len(dataset)} samples, {os.path.getsize(path)} bytes")
finally:
    shutil.rmtree(tmp)
