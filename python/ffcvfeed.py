"""Old name of :mod:`ffcvfs.feed`; ``from ffcvfs import Loader`` is the new one."""

from ffcvfs.feed import *  # noqa: F401,F403
from ffcvfs.feed import __all__  # noqa: F401
