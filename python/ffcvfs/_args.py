"""Checks of the numbers the samplers and the Loader take from callers and
from saved states, with the bounds of the Go side (package order): every
number is an integer in range before it names an order file or a flag, and
an error says so in a short sentence, whatever it was given."""

import operator
import reprlib
from typing import Any, List, Tuple

# The Go package order's bounds: MaxWorldSize, MaxSegments, MaxResumedRanks
# and MaxPosition. Seeds and epochs are 64-bit there.
MAX_WORLD_SIZE = 1 << 20
MAX_SEGMENTS = 64
MAX_RESUMED_RANKS = 1 << 22
MAX_POSITION = (1 << 32) - 1
MAX_U64 = (1 << 64) - 1

_short = reprlib.Repr()
_short.maxstring = 40
_short.maxother = 40
_short.maxlist = _short.maxtuple = _short.maxdict = 4


def short(value: Any) -> str:
    """repr(value), cut short: an error never quotes megabytes."""
    return _short.repr(value)


def int_arg(name: str, value: Any, minimum: int, maximum: int = MAX_U64) -> int:
    """value as an int in [minimum, maximum], or a ValueError naming it: no
    bools, floats (0.9 is no batch), infinities or strings."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an integer, not a bool ({value!r})")
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an integer, got {short(value)} ({type(value).__name__})") from None
    if v < minimum or v > maximum:
        raise ValueError(f"{name} must be {minimum} to {maximum}, got {short(v)}")
    return v


def segments_arg(segs: Any) -> List[Tuple[int, int]]:
    """A state's earlier parts, [[world_size, position], ...], checked as
    the Go side checks them: at most MAX_SEGMENTS, each world size 1 to
    MAX_WORLD_SIZE and their sum at most MAX_RESUMED_RANKS, each position 0
    to MAX_POSITION."""
    if not isinstance(segs, (list, tuple)):
        raise ValueError(f"the state's segments must be a list of [world_size, position] pairs, got {short(segs)}")
    if len(segs) >= MAX_SEGMENTS:
        raise ValueError(f"the state has {len(segs)} earlier segments; an epoch resumes at most {MAX_SEGMENTS} times")
    out = []
    ranks = 0
    for seg in segs:
        try:
            w, p = seg
        except (TypeError, ValueError):
            raise ValueError(f"the state's segments are not [world_size, position] pairs: {short(segs)}") from None
        w = int_arg("segment world size", w, 1, MAX_WORLD_SIZE)
        out.append((w, int_arg("segment position", p, 0, MAX_POSITION)))
        ranks += w
    if ranks > MAX_RESUMED_RANKS:
        raise ValueError(f"the state's segments have {ranks} ranks in all; at most {MAX_RESUMED_RANKS}")
    return out
