"""Writes pipeline/testdata/ffcvfs-every-field.ffcv-loader.json: what FFCV
1.0's own Loader delivers for the beton that ffcvfs.DatasetWriter writes
from the every-field dataset (scripts/every_field_dataset.py), with that
beton's SHA-256, so that a test without FFCV can check that the writer
still writes those bytes and that FFCV read from them what it reads from
the beton its own writer made (pipeline/testdata/ffcv-every-field.*).

    /usr/bin/python3 scripts/make_ffcv_writer_fixture.py --ffcv FFCV_SRC PHOTO_DIR OUT_DIR

The Python package (python/) and the ffcvfs program must be importable
and runnable ($FFCVFS, the package's own build, or the PATH).
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True)
ap.add_argument("photos")
ap.add_argument("out")
args = ap.parse_args()
sys.path.insert(0, args.ffcv)
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import every_field_dataset  # noqa: E402

with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "ffcvfs-every-field.beton")
    subprocess.run([sys.executable, os.path.join(here, "every_field_dataset.py"), "write", args.photos, path], check=True)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    samples = every_field_dataset.ffcv_manifest(path)
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "ffcvfs-every-field.ffcv-loader.json"), "w") as f:
    json.dump({"writer": "ffcvfs.DatasetWriter", "reader": "FFCV 1.0 Loader", "beton_sha256": digest,
               "num_samples": len(samples), "samples": samples}, f, indent=1)
print(f"{len(samples)} samples read by FFCV from a beton of SHA-256 {digest[:12]}")
