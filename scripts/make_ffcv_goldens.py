"""Writes pipeline/augment/testdata/ffcv-transforms.json.gz: FFCV 1.0's own
transforms applied to real photos, with every random draw they made, so that
ffcvfeed's transforms can be checked pixel for pixel against FFCV's given
the same draws.

    /usr/bin/python3 scripts/make_ffcv_goldens.py --ffcv FFCV_SRC PHOTO_DIR OUT

FFCV runs with its compiler off (plain NumPy, as Numba mirrors it) and
NumPy's draw functions wrapped so that each draw is recorded.
"""
import argparse
import base64
import glob
import gzip
import json
import os
import sys

import numpy as np
from PIL import Image

ap = argparse.ArgumentParser()
ap.add_argument("--ffcv", required=True)
ap.add_argument("photos")
ap.add_argument("out")
args = ap.parse_args()
sys.path.insert(0, args.ffcv)

from ffcv.pipeline.compiler import Compiler  # noqa: E402
import ffcv.transforms.translate as translate_mod  # noqa: E402
import ffcv.transforms.flip as flip_mod  # noqa: E402
from ffcv.transforms import (Cutout, ImageMixup, LabelMixup, Poison, RandomBrightness,  # noqa: E402
                             RandomContrast, RandomHorizontalFlip, RandomSaturation,
                             RandomTranslate, ReplaceLabel)

Compiler.set_enabled(False)
Compiler.set_num_threads(1)

W, H, N = 31, 23, 4  # sides that are no multiple of a SIMD width
paths = sorted(glob.glob(os.path.join(args.photos, "*", "*.jpg")))[::40][:N]
images = np.stack([np.asarray(Image.open(p).convert("RGB").resize((W, H), Image.BILINEAR)) for p in paths])
labels = np.arange(N, dtype=np.int64).reshape(N, 1) * 3 + 1
indices = np.array([4, 9, 17, 23], dtype=np.int64)  # the samples' ids

draws = []


def recording(name, fn):
    def wrapped(*a, **k):
        r = fn(*a, **k)
        draws.append([name, np.asarray(r, dtype=np.float64).ravel().tolist()])
        return r
    return wrapped


np.random.rand = recording("rand", np.random.rand)
np.random.randint = recording("randint", np.random.randint)
np.random.uniform = recording("uniform", np.random.uniform)
np.random.beta = recording("beta", np.random.beta)
translate_mod.randint = recording("randint", translate_mod.randint)
flip_mod.rand = recording("rand", flip_mod.rand)


def b64(a):
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode()


cases = []


def run(name, op, params, data, extra, seed):
    np.random.seed(seed)
    draws.clear()
    data = data.copy()
    fn = op.generate_code()
    dst = np.zeros((N,) + extra[0], dtype=extra[1]) if extra else None
    args = [data, dst]
    if getattr(fn, "with_indices", False) or name in ("replace_label", "poison"):
        args.append(indices)
    out = fn(*args)
    cases.append({"op": name, "params": params, "draws": [list(d) for d in draws], "dtype": str(out.dtype),
                  "shape": list(out.shape), "output": b64(out)})


fill = (125, 123, 114)
for seed in (1, 2):
    run("flip", RandomHorizontalFlip(0.5), {"p": 0.5}, images, ((H, W, 3), np.uint8), seed)
    run("translate", RandomTranslate(padding=2, fill=fill), {"padding": 2, "fill": fill}, images,
        ((H + 4, W + 4, 3), np.uint8), seed)
    run("translate", RandomTranslate(padding=6, fill=(0, 0, 0)), {"padding": 6, "fill": [0, 0, 0]}, images,
        ((H + 12, W + 12, 3), np.uint8), seed)
    run("cutout", Cutout(4, fill), {"size": 4, "fill": fill}, images, None, seed)
    run("cutout", Cutout(16, (255, 0, 7)), {"size": 16, "fill": [255, 0, 7]}, images, None, seed)
    for cls, name in ((RandomBrightness, "brightness"), (RandomContrast, "contrast"), (RandomSaturation, "saturation")):
        for mag, p in ((0.4, 0.5), (0.9, 1.0), (1.5, 1.0)):
            run(name, cls(mag, p), {"magnitude": mag, "p": p}, images, None, seed)
    for same in (True, False):
        run("image_mixup", ImageMixup(0.2, same), {"alpha": 0.2, "same_lambda": same}, images, ((H, W, 3), np.uint8), seed)
        run("label_mixup", LabelMixup(0.2, same), {"alpha": 0.2, "same_lambda": same}, labels, ((3,), np.float32), seed)
run("replace_label", ReplaceLabel(np.array([9, 23]), 77), {"indices": [9, 23], "new_label": 77}, labels, None, 0)
rng = np.random.default_rng(5)
mask = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
alpha = rng.random((H, W))
for clamp in ((0, 255), (40, 200)):
    run("poison", Poison(mask, alpha, np.array([4, 17, 42]), clamp),
        {"mask": b64(mask), "alpha": b64(alpha), "indices": [4, 17, 42], "clamp": list(clamp)},
        images, ((H, W, 3), np.float32), 0)

with gzip.open(args.out, "wt") as f:
    json.dump({"width": W, "height": H, "images": b64(images), "labels": labels.ravel().tolist(),
               "indices": indices.tolist(), "cases": cases}, f)
print(f"{len(cases)} cases of {N} images of {W}x{H} written to {args.out}")
