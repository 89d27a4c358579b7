"""The fields of a beton, for :class:`ffcvfs.writer.DatasetWriter`: FFCV's
field classes, with the same names and arguments, so that a script written
for FFCV's writer runs after changing its imports only::

    from ffcvfs.fields import RGBImageField, IntField   # was: from ffcv.fields import ...

Each field turns one value of a sample into its part of a frame of the
stream that ``ffcvfs write --from-stream`` reads (the format is documented
in the Go package beton/stream); the decoding, resizing, JPEG encoding and
packing are done there, on all cores. A value that does not suit its
field raises TypeError or ValueError, which the writer reports with the
sample's index and the field's name.
"""

import json
import struct
from typing import Any, List, Optional, Tuple

import numpy as np

__all__ = ["Field", "BytesField", "IntField", "FloatField", "RGBImageField", "NDArrayField", "JSONField",
           "TorchTensorField"]

_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U32 = struct.Struct("<I")
_IMG = struct.Struct("<BIII")

FORM_FILE = 0
FORM_PIXELS = 1

try:
    from PIL import Image as _PIL
except ImportError:  # arrays are then sent as pixels
    _PIL = None


def _scalar(value: Any) -> Any:
    """A Python number from a NumPy or torch scalar (or one-element array)."""
    item = getattr(value, "item", None)
    if item is not None and not isinstance(value, (int, float)):
        try:
            return item()
        except (ValueError, RuntimeError) as e:
            raise ValueError(f"want one number, got an array of shape {tuple(getattr(value, 'shape', ()))}") from e
    return value


class Field:
    """A field of a beton. Subclasses say how a value is sent."""

    type_name = ""

    def spec(self, name: str) -> dict:
        """The field's entry in the stream's header."""
        return {"name": name, "type": self.type_name}

    def encode(self, value: Any, out: List[bytes]) -> None:
        """Appends the value's bytes in a sample frame to out."""
        raise NotImplementedError


class IntField(Field):
    """A signed 64-bit integer (FFCV's IntField)."""

    type_name = "int"

    def encode(self, value, out):
        value = _scalar(value)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            else:
                raise TypeError(f"want an integer, got {type(value).__name__} {value!r:.40}")
        try:
            out.append(_I64.pack(value))
        except struct.error as e:
            raise ValueError(f"{value} does not fit a signed 64-bit integer") from e


class FloatField(Field):
    """A 64-bit float (FFCV's FloatField)."""

    type_name = "float"

    def encode(self, value, out):
        value = _scalar(value)
        try:
            out.append(_F64.pack(value))
        except struct.error as e:
            raise TypeError(f"want a number, got {type(value).__name__}") from e


class BytesField(Field):
    """Bytes of any length (FFCV's BytesField): a 1-D uint8 array, as FFCV
    wants, or bytes, bytearray or memoryview."""

    type_name = "bytes"

    def encode(self, value, out):
        if isinstance(value, np.ndarray):
            if value.dtype != np.uint8 or value.ndim != 1:
                raise ValueError(f"want a 1-D uint8 array, got {value.dtype} of shape {value.shape}")
            value = np.ascontiguousarray(value).tobytes()
        elif isinstance(value, (bytearray, memoryview)):
            value = bytes(value)
        elif not isinstance(value, bytes):
            raise TypeError(f"want bytes or a 1-D uint8 array, got {type(value).__name__}")
        out.append(_U32.pack(len(value)))
        out.append(value)


class JSONField(BytesField):
    """Any value json.dumps encodes (FFCV's JSONField), stored as its text,
    the same bytes as FFCV's. ``JSONField.unpack`` turns a loaded batch back
    into objects, as FFCV's does."""

    type_name = "json"

    def encode(self, value, out):
        try:
            text = json.dumps(value).encode("utf8")
        except (TypeError, ValueError) as e:
            raise TypeError(f"cannot be encoded as JSON: {e}") from e
        out.append(_U32.pack(len(text)))
        out.append(text)

    @staticmethod
    def unpack(batch):
        """Decodes what a loader gives for a JSON field (a sample's bytes,
        NUL-terminated, or a batch of them) into objects."""
        arr = batch.numpy() if hasattr(batch, "numpy") else np.asarray(batch)
        single = arr.ndim == 1
        rows = [arr] if single else list(arr)
        result = []
        for row in rows:
            b = bytes(row)
            result.append(json.loads(b.split(b"\0", 1)[0].decode("utf8")))
        return result[0] if single else result


class NDArrayField(Field):
    """A NumPy array of a fixed dtype and shape (FFCV's NDArrayField). Each
    value must have exactly that dtype and shape."""

    type_name = "ndarray"

    def __init__(self, dtype: np.dtype, shape: Tuple[int, ...]):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(d) for d in shape)
        if not self.shape or any(d <= 0 for d in self.shape) or len(self.shape) > 32:
            raise ValueError(f"an array field's shape has 1 to 32 positive dimensions, got {shape}")
        if self.dtype.kind not in "biufc" or self.dtype.fields is not None:
            raise ValueError(f"an array field holds numbers or bools, not {self.dtype}")
        self.element_size = self.dtype.itemsize * int(np.prod(self.shape))

    def spec(self, name):
        return {"name": name, "type": self.type_name, "dtype": self.dtype.str, "shape": list(self.shape)}

    def _array(self, value):
        return value

    def encode(self, value, out):
        value = self._array(value)
        if not isinstance(value, np.ndarray):
            raise TypeError(f"want a NumPy array of {self.dtype} and shape {self.shape}, got {type(value).__name__}")
        if value.dtype != self.dtype or value.shape != self.shape:
            raise ValueError(f"want {self.dtype} of shape {self.shape}, got {value.dtype} of shape {value.shape}")
        data = np.ascontiguousarray(value).tobytes()
        out.append(_U32.pack(len(data)))
        out.append(data)


class TorchTensorField(NDArrayField):
    """A torch tensor of a fixed dtype and shape (FFCV's TorchTensorField),
    stored as FFCV stores it (an array, type 6)."""

    type_name = "torch_tensor"

    def __init__(self, dtype, shape: Tuple[int, ...]):
        import torch
        self.torch_dtype = dtype
        super().__init__(torch.zeros(0, dtype=dtype).numpy().dtype, shape)

    def _array(self, value):
        if hasattr(value, "detach"):
            return value.detach().cpu().numpy()
        return value


class RGBImageField(Field):
    """An RGB image (FFCV's RGBImageField, with its arguments).

    A value may be a PIL image (converted to RGB), an HxWx3 uint8 NumPy
    array, or an encoded image file's bytes (JPEG, PNG, ...), which FFCV
    does not take: a JPEG that fits is stored as it is, byte for byte.

    write_mode: 'raw' (pixels, FFCV's default), 'jpg', 'smart' (a JPEG when
    the pixels would take more than smart_threshold bytes; never without a
    threshold, as in FFCV) or 'proportion' (a JPEG with probability
    compress_probability, drawn reproducibly per sample).
    max_resolution: images whose longer side is larger are shrunk to it
    (OpenCV's INTER_AREA, as FFCV). jpeg_quality: for images encoded here.
    restart_interval: every JPEG stored is transcoded losslessly with a
    restart marker about every this many MCUs (FFCV, PIL and torchvision
    decode the same pixels; ffcvfeed decodes crops of it faster); 0: JPEGs
    as they are.
    """

    type_name = "rgb_image"

    def __init__(self, write_mode: str = "raw", max_resolution: Optional[int] = None,
                 smart_threshold: Optional[int] = None, jpeg_quality: int = 90,
                 compress_probability: float = 0.5, restart_interval: int = 4) -> None:
        if write_mode not in ("raw", "jpg", "smart", "proportion"):
            raise ValueError(f"write_mode {write_mode!r}: want 'raw', 'jpg', 'smart' or 'proportion'")
        self.write_mode = write_mode
        self.max_resolution = max_resolution
        self.smart_threshold = smart_threshold
        self.jpeg_quality = int(jpeg_quality)
        self.proportion = compress_probability
        if max_resolution is not None and int(max_resolution) < 0:
            raise ValueError(f"max_resolution {max_resolution} is negative")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality {jpeg_quality} is outside 1..100")
        if not 0 <= float(compress_probability) <= 1:
            raise ValueError(f"compress_probability {compress_probability} is outside [0, 1]")
        self.restart_interval = int(restart_interval)
        if not 0 <= self.restart_interval <= 65535:
            raise ValueError(f"restart_interval {restart_interval} is outside 0..65535 MCUs")

    def spec(self, name):
        s = {"name": name, "type": self.type_name, "write_mode": self.write_mode,
             "jpeg_quality": self.jpeg_quality, "compress_probability": float(self.proportion),
             "restart_interval": self.restart_interval}
        if self.max_resolution:
            s["max_resolution"] = int(self.max_resolution)
        if self.smart_threshold is not None:
            s["smart_threshold"] = int(self.smart_threshold)
        return s

    def _jpeg_here(self, w, h):
        """Whether the worker encodes the JPEG itself: when the image is
        stored as a JPEG without resizing (see encode)."""
        jpeg = self.write_mode == "jpg" or (
            self.write_mode == "smart" and self.smart_threshold is not None and w * h * 3 > self.smart_threshold)
        return jpeg and (not self.max_resolution or max(w, h) <= self.max_resolution) and w <= 65535 and h <= 65535

    def _send_jpeg(self, image, out):
        """Encodes a PIL RGB image as ffcvfs write's encoder does and sends
        the file."""
        import io
        buf = io.BytesIO()
        # libjpeg-turbo at the field's quality, 4:2:0, no comment: the
        # same bytes as ffcvfs write's encoder (and FFCV's) with Debian's
        # Pillow (TestDatasetWriterFFCVEveryField).
        image.save(buf, "JPEG", quality=self.jpeg_quality, subsampling=2, comment=b"")
        data = buf.getvalue()
        out.append(_IMG.pack(FORM_FILE, 0, 0, len(data)))
        out.append(data)

    def encode(self, image, out):
        """Sends the image. One stored as a JPEG without resizing is encoded
        here, by the worker, with Pillow (libjpeg-turbo, as ffcvfs write):
        its file is a tenth of the pixels it replaces, which would
        otherwise cross the pipe; others are sent as pixels (or as the
        file given) and prepared by ffcvfs write."""
        if isinstance(image, np.ndarray):
            if image.dtype != np.uint8:
                raise ValueError(f"an image array must be uint8, got {image.dtype}")
            if image.ndim != 3 or image.shape[2] != 3:
                raise ValueError(f"an image array must be HxWx3, got shape {image.shape}")
            h, w = image.shape[:2]
            if _PIL is not None and self._jpeg_here(w, h):
                self._send_jpeg(_PIL.fromarray(image), out)
                return
            data = image.tobytes() if image.flags.c_contiguous else np.ascontiguousarray(image).tobytes()
            out.append(_IMG.pack(FORM_PIXELS, w, h, len(data)))
            out.append(data)
            return
        if isinstance(image, (bytes, bytearray, memoryview)):
            data = bytes(image)
            out.append(_IMG.pack(FORM_FILE, 0, 0, len(data)))
            out.append(data)
            return
        if all(hasattr(image, a) for a in ("tobytes", "convert", "size", "mode")):  # a PIL image
            if image.mode != "RGB":
                image = image.convert("RGB")
            w, h = image.size
            if self._jpeg_here(w, h):
                self._send_jpeg(image, out)
                return
            data = image.tobytes()
            out.append(_IMG.pack(FORM_PIXELS, w, h, len(data)))
            out.append(data)
            return
        raise TypeError(f"want a PIL image, an HxWx3 uint8 array or an image file's bytes, got {type(image).__name__}")
