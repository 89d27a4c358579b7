"""Writes pipeline/testdata/ffcv-every-field.beton.gz and its manifest: a
beton written by FFCV 1.0 itself with every field type FFCV has, made from
real photos (the dataset of scripts/every_field_dataset.py), and what
FFCV's own Loader delivers for every field of every sample (SHA-256 of
each sample's bytes, values of the small ones).

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
import gzip
import json
import os
import shutil
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True)
ap.add_argument("photos")
ap.add_argument("out")
args = ap.parse_args()
sys.path.insert(0, args.ffcv)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ffcv.fields  # noqa: E402
from ffcv.writer import DatasetWriter  # noqa: E402
from every_field_dataset import N, EveryField, ffcv_manifest, fields  # noqa: E402

fields = fields(ffcv.fields)
tmp = tempfile.mkdtemp()
path = os.path.join(tmp, "ffcv-every-field.beton")
DatasetWriter(path, fields, num_workers=1).from_indexed_dataset(EveryField(args.photos))
samples = ffcv_manifest(path)
os.makedirs(args.out, exist_ok=True)
with open(path, "rb") as src, gzip.open(os.path.join(args.out, "ffcv-every-field.beton.gz"), "wb", 9) as dst:
    shutil.copyfileobj(src, dst)
with open(os.path.join(args.out, "ffcv-every-field.beton.manifest.json"), "w") as f:
    json.dump({"writer": "FFCV " + __import__("ffcv").__version__ if hasattr(__import__("ffcv"), "__version__") else "FFCV",
               "num_samples": N, "fields": {k: type(v).__name__ for k, v in fields.items()}, "samples": samples}, f, indent=1)
print(f"{N} samples written to {args.out}")
shutil.rmtree(tmp)
