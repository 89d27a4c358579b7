"""A script written for FFCV's writer, in the style of FFCV's documentation
(https://docs.ffcv.io/writing_datasets.html): fields of every type,
from_indexed_dataset with two workers. TestDatasetWriterFFCVScript runs it
with its imports changed to ffcvfs's, and nothing else.

    python ffcv_style.py OUT.beton
"""
import sys

import numpy as np
import torch
from PIL import Image

from ffcv.fields import (BytesField, FloatField, IntField, JSONField, NDArrayField, RGBImageField,
                         TorchTensorField)
from ffcv.writer import DatasetWriter


class DetectionDataset:
    """A torchvision-style dataset: a PIL image, a label, boxes, ..."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        rng = np.random.default_rng(idx)
        img = Image.fromarray(rng.integers(0, 256, (40 + idx % 7, 50 + idx % 5, 3), dtype=np.uint8))
        boxes = rng.random((4, 4)).astype(np.float32)
        return (img, np.asarray(rng.integers(0, 256, (8, 8, 3)), dtype=np.uint8), idx % 10, idx / 10,
                boxes, torch.arange(3, dtype=torch.int32) + idx, np.frombuffer(f"sample-{idx}".encode(), dtype=np.uint8),
                {"id": idx, "boxes": boxes.round(3).tolist()})


write_path = sys.argv[1]
writer = DatasetWriter(write_path, {
    "image": RGBImageField(write_mode="smart", max_resolution=32, smart_threshold=1000),
    "thumb": RGBImageField(),
    "label": IntField(),
    "score": FloatField(),
    "boxes": NDArrayField(dtype=np.dtype("float32"), shape=(4, 4)),
    "ids": TorchTensorField(torch.int32, (3,)),
    "name": BytesField(),
    "meta": JSONField(),
}, num_workers=2)
writer.from_indexed_dataset(DetectionDataset(60), chunksize=7)
