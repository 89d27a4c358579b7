"""Writes pipeline/testdata/ffcv-every-field.beton.gz and its manifest: a
beton written by FFCV 1.0 itself with every field type FFCV has, made from
real photos, and what FFCV's own Loader delivers for every field of every
sample (SHA-256 of each sample's bytes, values of the small ones).

    /usr/bin/python3 scripts/make_ffcv_fixture.py --ffcv FFCV_SRC PHOTO_DIR OUT_DIR

Fields: image (RGBImageField, raw, 32x32), jpeg (RGBImageField, JPEG
quality 90, 48x40), label (IntField), weight (FloatField), vec
(NDArrayField int16 2x3), tensor (TorchTensorField float64 4), blob
(BytesField), meta (JSONField). FFCV's Loader decodes JPEGs with
libjpeg-turbo's fast integer IDCT (TJFLAG_FASTDCT); the manifest also holds
the accurate decode of the same stored JPEG (PIL, libjpeg-turbo's default
IDCT), which is what ffcvfeed delivers.
"""
import argparse
import glob
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
from PIL import Image

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True)
ap.add_argument("photos")
ap.add_argument("out")
args = ap.parse_args()
sys.path.insert(0, args.ffcv)

from ffcv.fields import (BytesField, FloatField, IntField, JSONField, NDArrayField,  # noqa: E402
                         RGBImageField, TorchTensorField)
from ffcv.fields.basics import FloatDecoder, IntDecoder  # noqa: E402
from ffcv.fields.bytes import BytesDecoder  # noqa: E402
from ffcv.fields.decoders import SimpleRGBImageDecoder  # noqa: E402
from ffcv.fields.ndarray import NDArrayDecoder  # noqa: E402
from ffcv.loader import Loader, OrderOption  # noqa: E402
from ffcv.reader import Reader  # noqa: E402
from ffcv.writer import DatasetWriter  # noqa: E402

N = 40
paths = sorted(glob.glob(os.path.join(args.photos, "*", "*.jpg")))[::5][:N]
rng = np.random.default_rng(31)


class Data:
    def __len__(self):
        return N

    def __getitem__(self, i):
        i = int(i)
        photo = Image.open(paths[i]).convert("RGB")
        small = np.asarray(photo.resize((32, 32), Image.BILINEAR))
        jpeg = np.asarray(photo.resize((48, 40), Image.BILINEAR))
        r = np.random.default_rng(i)
        blob = r.integers(0, 256, int(r.integers(0, 300)), dtype=np.uint8)
        meta = {"id": i, "file": os.path.relpath(paths[i], args.photos), "boxes": r.integers(0, 32, (int(r.integers(0, 4)), 4)).tolist()}
        return (small, jpeg, i % 10, float(r.random()), r.integers(-30000, 30000, (2, 3)).astype(np.int16),
                torch.from_numpy(r.standard_normal(4)), blob, meta)


fields = {
    "image": RGBImageField(write_mode="raw"),
    "jpeg": RGBImageField(write_mode="jpg", jpeg_quality=90),
    "label": IntField(),
    "weight": FloatField(),
    "vec": NDArrayField(np.dtype("int16"), (2, 3)),
    "tensor": TorchTensorField(torch.float64, (4,)),
    "blob": BytesField(),
    "meta": JSONField(),
}
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "ffcv-every-field.beton")
DatasetWriter(path, fields, num_workers=1).from_indexed_dataset(Data())

reader = Reader(path)
sha = lambda b: hashlib.sha256(np.ascontiguousarray(b).tobytes()).hexdigest()
decoders = {"image": SimpleRGBImageDecoder(), "jpeg": SimpleRGBImageDecoder(), "label": IntDecoder(),
            "weight": FloatDecoder(), "vec": NDArrayDecoder(), "tensor": NDArrayDecoder(),
            "blob": BytesDecoder(), "meta": BytesDecoder()}
loader = Loader(path, batch_size=16, num_workers=1, order=OrderOption.SEQUENTIAL, drop_last=False,
                pipelines={k: [v] for k, v in decoders.items()}, custom_fields={})
names = list(fields)
samples = []
for batch in loader:
    cols = dict(zip(names, batch))
    for j in range(len(cols["label"])):
        i = len(samples)
        m = reader.metadata[i]
        s = {}
        for k in names:
            v = cols[k][j]
            v = v.numpy() if isinstance(v, torch.Tensor) else np.asarray(v)
            if k in ("blob", "meta"):
                size = int(m[names.index(k)]["size"])
                s[k] = {"size": size, "sha256": sha(v[:size])}
            elif k in ("image", "jpeg"):
                s[k] = {"shape": list(v.shape), "sha256": sha(v)}
            else:
                s[k] = {"dtype": str(v.dtype), "value": v.tolist(), "sha256": sha(v)}
        # The stored JPEG, decoded accurately.
        ptr = int(m[names.index("jpeg")]["data_ptr"])
        with open(path, "rb") as f:
            f.seek(ptr)
            data = f.read(1 << 20)
        img = Image.open(io.BytesIO(data))
        img.load()
        s["jpeg"]["accurate_sha256"] = sha(np.asarray(img.convert("RGB")))
        for k in ("blob", "meta"):
            mk = m[names.index(k)]
            with open(path, "rb") as f:
                f.seek(int(mk["ptr"]))
                stored = f.read(int(mk["size"]))
            s[k]["stored_sha256"] = hashlib.sha256(stored).hexdigest()
        s["meta"]["json"] = json.loads(stored.split(b"\0")[0])
        samples.append(s)
os.makedirs(args.out, exist_ok=True)
with open(path, "rb") as src, gzip.open(os.path.join(args.out, "ffcv-every-field.beton.gz"), "wb", 9) as dst:
    shutil.copyfileobj(src, dst)
with open(os.path.join(args.out, "ffcv-every-field.beton.manifest.json"), "w") as f:
    json.dump({"writer": "FFCV " + __import__("ffcv").__version__ if hasattr(__import__("ffcv"), "__version__") else "FFCV",
               "num_samples": N, "fields": {k: type(v).__name__ for k, v in fields.items()}, "samples": samples}, f, indent=1)
print(f"{N} samples written to {args.out}")
shutil.rmtree(tmp)
