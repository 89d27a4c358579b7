"""Old name of :mod:`ffcvfs.sampler`; ``from ffcvfs import QuasiRandomSampler`` is the new one."""

from ffcvfs.sampler import *  # noqa: F401,F403
from ffcvfs.sampler import __all__  # noqa: F401
