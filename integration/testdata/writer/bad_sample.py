"""Writes a 20-sample dataset whose sample 7 is bad in the way KIND says,
for TestDatasetWriterBadSamples and TestDatasetWriterWorkerEnds: the write
must fail naming sample 7 and its field, or the worker on it and how it
ended, and leave nothing at OUT.

    python bad_sample.py KIND OUT.beton
"""
import os
import signal
import sys

import numpy as np

from ffcvfs.fields import IntField, JSONField, NDArrayField, RGBImageField
from ffcvfs.writer import DatasetWriter

kind, out = sys.argv[1], sys.argv[2]


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


class Data:
    def __len__(self):
        return 20

    def __getitem__(self, i):
        image = np.zeros((8, 8, 3), np.uint8)
        vec = np.zeros((2, 3), np.float32)
        meta = {"id": i}
        if i == 7:
            if kind == "shape":
                vec = np.zeros((3, 2), np.float32)
            elif kind == "dtype":
                vec = np.zeros((2, 3), np.float64)
            elif kind == "image":
                image = b"this is not an image file"
            elif kind == "json":
                meta = {"id": {1, 2}}
            elif kind == "dataset":
                raise KeyError("no such record")
            elif kind == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif kind == "exit3":
                os._exit(3)
            elif kind == "exit0":
                os._exit(0)
            elif kind == "systemexit":
                sys.exit(3)
            elif kind == "keyboard":
                raise KeyboardInterrupt
            elif kind == "badstr":
                raise Unprintable()
        return image, i, vec, meta


DatasetWriter(out, {"image": RGBImageField(write_mode="jpg"), "label": IntField(),
                    "vec": NDArrayField(np.dtype("float32"), (2, 3)), "meta": JSONField()},
              num_workers=2).from_indexed_dataset(Data(), chunksize=3)
