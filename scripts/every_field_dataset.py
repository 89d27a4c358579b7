"""The dataset of the every-field fixtures: 40 samples made from the
photos of testdata/imagefolder-small, with a value for each of FFCV's
field types, and what FFCV's own Loader delivers for a beton of it.

    /usr/bin/python3 scripts/every_field_dataset.py write PHOTO_DIR OUT.beton [NUM_WORKERS]

writes it with ffcvfs.DatasetWriter (the Python package must be
importable); scripts/make_ffcv_fixture.py writes it with FFCV's
DatasetWriter, and scripts/make_ffcv_writer_fixture.py reads ours with
FFCV's Loader. Fields: image (raw, 32x32), jpeg (JPEG quality 90, 48x40),
label (int), weight (float), vec (int16 2x3), tensor (torch float64 4),
blob (bytes), meta (JSON).
"""
import glob
import hashlib
import io
import json
import os
import sys

import numpy as np

N = 40


class EveryField:
    """40 samples of every field type from the photos in photos (the same
    values every time)."""

    def __init__(self, photos):
        self.photos = photos
        self.paths = sorted(glob.glob(os.path.join(photos, "*", "*.jpg")))[::5][:N]

    def __len__(self):
        return N

    def __getitem__(self, i):
        import torch
        from PIL import Image
        i = int(i)
        photo = Image.open(self.paths[i]).convert("RGB")
        small = np.asarray(photo.resize((32, 32), Image.BILINEAR))
        jpeg = np.asarray(photo.resize((48, 40), Image.BILINEAR))
        r = np.random.default_rng(i)
        blob = r.integers(0, 256, int(r.integers(0, 300)), dtype=np.uint8)
        meta = {"id": i, "file": os.path.relpath(self.paths[i], self.photos),
                "boxes": r.integers(0, 32, (int(r.integers(0, 4)), 4)).tolist()}
        return (small, jpeg, i % 10, float(r.random()), r.integers(-30000, 30000, (2, 3)).astype(np.int16),
                torch.from_numpy(r.standard_normal(4)), blob, meta)


def fields(mod):
    """The fields, from mod: ffcv.fields or ffcvfs.fields."""
    import torch
    return {
        "image": mod.RGBImageField(write_mode="raw"),
        "jpeg": mod.RGBImageField(write_mode="jpg", jpeg_quality=90),
        "label": mod.IntField(),
        "weight": mod.FloatField(),
        "vec": mod.NDArrayField(np.dtype("int16"), (2, 3)),
        "tensor": mod.TorchTensorField(torch.float64, (4,)),
        "blob": mod.BytesField(),
        "meta": mod.JSONField(),
    }


def ffcv_manifest(path):
    """What FFCV's Loader delivers for every field of every sample of the
    beton at path (FFCV must be importable): SHA-256 of each sample's
    bytes, values of the small ones, the stored bytes of bytes and JSON,
    and the accurate decode of the stored JPEG."""
    import torch
    from PIL import Image
    from ffcv.fields.basics import FloatDecoder, IntDecoder
    from ffcv.fields.bytes import BytesDecoder
    from ffcv.fields.decoders import SimpleRGBImageDecoder
    from ffcv.fields.ndarray import NDArrayDecoder
    from ffcv.loader import Loader, OrderOption
    from ffcv.reader import Reader

    reader = Reader(path)
    sha = lambda b: hashlib.sha256(np.ascontiguousarray(b).tobytes()).hexdigest()  # noqa: E731
    decoders = {"image": SimpleRGBImageDecoder(), "jpeg": SimpleRGBImageDecoder(), "label": IntDecoder(),
                "weight": FloatDecoder(), "vec": NDArrayDecoder(), "tensor": NDArrayDecoder(),
                "blob": BytesDecoder(), "meta": BytesDecoder()}
    loader = Loader(path, batch_size=16, num_workers=1, order=OrderOption.SEQUENTIAL, drop_last=False,
                    pipelines={k: [v] for k, v in decoders.items()}, custom_fields={})
    names = list(decoders)
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
    return samples


def main():
    if len(sys.argv) not in (4, 5) or sys.argv[1] != "write":
        sys.exit(__doc__)
    import ffcvfs.fields
    from ffcvfs.writer import DatasetWriter
    workers = int(sys.argv[4]) if len(sys.argv) == 5 else 2
    DatasetWriter(sys.argv[3], fields(ffcvfs.fields), num_workers=workers).from_indexed_dataset(EveryField(sys.argv[2]))


if __name__ == "__main__":
    main()
