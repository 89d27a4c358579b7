"""Python side of ffcvfs and ffcvfeed.

- :class:`QuasiRandomSampler`, :class:`RandomSampler`: torch samplers that
  read their order from an ``ffcvfs mount`` (which announces it to the
  mount's cache), resumable mid-epoch with ``state_dict()``.
- :class:`Loader`: the client of ``ffcvfeed serve``, batches from shared
  memory without copying, resumable with ``state_dict()``.
- :class:`DatasetWriter` (:mod:`ffcvfs.writer`) and the fields of
  :mod:`ffcvfs.fields`: FFCV's writer, a drop-in, writing through
  ``ffcvfs write --from-stream``.

Each is imported on first use: the samplers need torch, the Loader NumPy.
The modules ``ffcvfs_sampler`` and ``ffcvfeed`` are the old names of
:mod:`ffcvfs.sampler` and :mod:`ffcvfs.feed`.
"""

from typing import TYPE_CHECKING, Any

__all__ = ["QuasiRandomSampler", "RandomSampler", "NotAnFfcvfsMountError", "Loader", "FeedError", "FeedWarning",
           "Ragged", "DatasetWriter", "WriteError"]

_WHERE = {
    "QuasiRandomSampler": "sampler",
    "RandomSampler": "sampler",
    "NotAnFfcvfsMountError": "sampler",
    "Loader": "feed",
    "FeedError": "feed",
    "FeedWarning": "feed",
    "Ragged": "feed",
    "DatasetWriter": "writer",
    "WriteError": "writer",
}

if TYPE_CHECKING:
    from .feed import FeedError, FeedWarning, Loader, Ragged
    from .sampler import NotAnFfcvfsMountError, QuasiRandomSampler, RandomSampler
    from .writer import DatasetWriter, WriteError


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'ffcvfs' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> "list[str]":
    return sorted(list(globals()) + __all__)
