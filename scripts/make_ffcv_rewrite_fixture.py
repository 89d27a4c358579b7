"""Writes pipeline/testdata/ffcv-every-field.from-beton.ffcv-loader.json:
what FFCV 1.0's own Loader delivers for the beton that `ffcvfs write
--from-beton` makes of the every-field beton FFCV's own writer wrote
(pipeline/testdata/ffcv-every-field.beton.gz), its JPEGs given restart
markers, with that beton's SHA-256, so that a test without FFCV can check
that the rewrite still writes those bytes and that FFCV reads from them
what it reads from the source. The script checks the latter itself: it
exits non-zero, naming the sample and field, where FFCV reads anything
else from the two.

    /usr/bin/python3 scripts/make_ffcv_rewrite_fixture.py --ffcv FFCV_SRC OUT_DIR

The ffcvfs program must be runnable ($FFCVFS, else bin/ffcvfs).
"""
import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True)
ap.add_argument("out")
args = ap.parse_args()
sys.path.insert(0, args.ffcv)
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.dirname(here)
sys.path.insert(0, here)
import every_field_dataset  # noqa: E402

ffcvfs = os.environ.get("FFCVFS") or os.path.join(root, "bin", "ffcvfs")
fixture = os.path.join(root, "pipeline", "testdata", "ffcv-every-field.beton.gz")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


with tempfile.TemporaryDirectory() as tmp:
    src = os.path.join(tmp, "ffcv-every-field.beton")
    with gzip.open(fixture, "rb") as f, open(src, "wb") as g:
        shutil.copyfileobj(f, g)
    out = os.path.join(tmp, "from-beton.beton")
    subprocess.run([ffcvfs, "write", "--from-beton", src, "--workers", "2", out], check=True)
    digest = sha256(out)
    theirs = every_field_dataset.ffcv_manifest(src)
    ours = every_field_dataset.ffcv_manifest(out)

if len(ours) != len(theirs):
    sys.exit(f"FFCV read {len(ours)} samples from the rewrite, {len(theirs)} from the source")
for i, (a, b) in enumerate(zip(ours, theirs)):
    for field in a:
        x, y = dict(a[field]), dict(b[field])
        if field == "meta" and a["blob"]["size"] == 0:
            # FFCV's Loader delivers the JSON of a sample whose bytes
            # field is empty from another address (its layout's): the
            # stored JSON is compared.
            x.pop("sha256"), y.pop("sha256")
        if x != y:
            sys.exit(f"sample {i}, field {field}: FFCV read {a[field]} from the rewrite, {b[field]} from the source")
os.makedirs(args.out, exist_ok=True)
with open(os.path.join(args.out, "ffcv-every-field.from-beton.ffcv-loader.json"), "w") as f:
    json.dump({"writer": "ffcvfs write --from-beton (of FFCV 1.0's DatasetWriter's beton)", "reader": "FFCV 1.0 Loader",
               "beton_sha256": digest, "num_samples": len(ours), "samples": ours}, f, indent=1)
print(f"{len(ours)} samples read by FFCV from a rewrite of SHA-256 {digest[:12]}, the same as from the source")
