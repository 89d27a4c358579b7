"""Builds the ffcvfs package with the programs ffcvfs and ffcvfeed inside it.

pyproject.toml holds the package's metadata; this file only adds a step to
the build: the Go programs are compiled (go build, from the Go source the
python/ folder sits in, or $FFCVFS_GO_SOURCE) into ffcvfs/bin/, and the
wheel is tagged for this platform, since it holds machine code. The
commands ffcvfs and ffcvfeed that pip puts on a virtual environment's PATH
run them. FFCVFS_NO_BINARIES=1 builds the Python code alone.

Needs, beside Python: Go 1.24 or newer, gcc, pkg-config and libjpeg-turbo's
headers (Debian: libjpeg62-turbo-dev), as the README's Install says.
"""

import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))


def go_source():
    src = os.environ.get("FFCVFS_GO_SOURCE") or os.path.dirname(HERE)
    if os.path.isfile(os.path.join(src, "go.mod")) and os.path.isdir(os.path.join(src, "cmd", "ffcvfeed")):
        return src
    return None


def go_command():
    go = shutil.which("go")
    if go is None and os.access("/usr/local/go/bin/go", os.X_OK):
        go = "/usr/local/go/bin/go"
    return go


def source_commit(src):
    """The commit of the Go source, +modified when it has uncommitted
    changes, for `ffcvfs version`; "" outside a git checkout."""
    git = shutil.which("git")
    if git is None:
        return ""
    try:
        rev = subprocess.run([git, "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run([git, "status", "--porcelain", "--untracked-files=no"], cwd=src, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return rev + ("+modified" if dirty else "")


class BuildPy(build_py):
    """build_py, then go build of the two programs into the package."""

    def run(self):
        super().run()
        if os.environ.get("FFCVFS_NO_BINARIES") == "1":
            return
        prebuilt = os.environ.get("FFCVFS_PREBUILT")
        if prebuilt:
            # scripts/wheel.sh: static programs built beforehand, for
            # another architecture perhaps.
            out = os.path.join(os.path.abspath(self.build_lib), "ffcvfs", "bin")
            os.makedirs(out, exist_ok=True)
            for name in ("ffcvfs", "ffcvfeed"):
                shutil.copy2(os.path.join(prebuilt, name), os.path.join(out, name))
            return
        src = go_source()
        if src is None:
            raise SystemExit("ffcvfs: the Go source (go.mod, cmd/) is not beside python/: set FFCVFS_GO_SOURCE "
                             "to it, or FFCVFS_NO_BINARIES=1 to build the Python code alone")
        go = go_command()
        if go is None:
            raise SystemExit("ffcvfs: go not found on the PATH or in /usr/local/go/bin: install Go 1.24 or newer "
                             "(https://go.dev/dl/), or set FFCVFS_NO_BINARIES=1 to build the Python code alone")
        out = os.path.join(os.path.abspath(self.build_lib), "ffcvfs", "bin")
        os.makedirs(out, exist_ok=True)
        ldflags = "-s -w"
        commit = source_commit(src)
        if commit:
            ldflags += " -X github.com/ffcvfs/ffcvfs/internal/version.commit=" + commit
        subprocess.run([go, "build", "-ldflags=" + ldflags, "-o", out + os.sep, "./cmd/ffcvfs", "./cmd/ffcvfeed"],
                       cwd=src, check=True)


class PlatformDistribution(Distribution):
    """A distribution with machine code: its wheel is tagged for this
    platform, not as pure Python."""

    def has_ext_modules(self):
        return os.environ.get("FFCVFS_NO_BINARIES") != "1"


cmdclass = {"build_py": BuildPy}
try:
    from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        """With FFCVFS_PLATFORM (scripts/wheel.sh), the wheel is tagged
        py3-none-PLATFORM: its programs are static, linked against no
        library of the system (not even the C library), so any Python 3
        on any Linux of that architecture runs them; manylinux_2_17 is
        the oldest tag pip knows for it."""

        def get_tag(self):
            plat = os.environ.get("FFCVFS_PLATFORM")
            if plat:
                return "py3", "none", plat
            return super().get_tag()

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:  # no wheel package: sdists and plain installs only
    pass

setup(cmdclass=cmdclass, distclass=PlatformDistribution)
