"""The commands ffcvfs and ffcvfeed that pip installs: each runs the program
of the same name built into the package (ffcvfs/bin/)."""

import contextlib
import os
import signal
import sys


def program(name: str) -> str:
    """The path of a program built into the package, or "" when the package
    was built without them (FFCVFS_NO_BINARIES=1)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", name)
    return path if os.access(path, os.X_OK) else ""


def _run(name: str) -> None:
    path = program(name)
    if not path:
        sys.exit(f"{name}: this installation of the Python package ffcvfs holds no programs "
                 f"(it was built with FFCVFS_NO_BINARIES=1); build them with: go build -o bin/ ./cmd/{name}")
    os.execv(path, [path] + sys.argv[1:])


def ffcvfs() -> None:
    _run("ffcvfs")


def ffcvfeed() -> None:
    _run("ffcvfeed")


@contextlib.contextmanager
def sigint_ignored():
    """Ignores SIGINT while a program is started from this (the main)
    thread: the program inherits it ignored, which Go keeps until the
    program catches it, so that a Ctrl-C in its first milliseconds does not
    kill it unheard. Elsewhere than the main thread, or where SIGINT's
    handler was set outside Python (it could not be put back), nothing."""
    held = signal.getsignal(signal.SIGINT)
    if held is None:
        yield
        return
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, held)
