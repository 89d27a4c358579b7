#!/usr/bin/env bash
# Builds the wheels that `pip install` takes on any Linux: static ffcvfs and
# ffcvfeed (no shared library at all, libjpeg-turbo and the C library
# linked in) with the Python package, for linux/amd64 and linux/arm64
# (cross-compiled with Debian's gcc-aarch64-linux-gnu and the arm64
# libjpeg62-turbo-dev of a multiarch install; no emulation to build).
#
#   scripts/wheel.sh [OUT_DIR]       # default dist/
#   ARCHES=amd64 scripts/wheel.sh    # one architecture
#
# Each wheel is tagged py3-none-manylinux_2_17_<arch> (see python/setup.py).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"
out=$(realpath -m "${1:-dist}")
arches=${ARCHES:-amd64 arm64}

ensure_apt "${FFCVFS_APT_BUILD[@]}" python3-setuptools python3-wheel python3-pip file
ensure_go
commit=$(git rev-parse HEAD 2>/dev/null || true)
if [[ -n $commit ]] && [[ -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
	commit+="+modified"
fi

mkdir -p "$out"
for arch in $arches; do
	case $arch in
	amd64) cc=gcc plat=manylinux_2_17_x86_64 libdir=/usr/lib/x86_64-linux-gnu ;;
	arm64)
		cc=aarch64-linux-gnu-gcc plat=manylinux_2_17_aarch64 libdir=/usr/lib/aarch64-linux-gnu
		ensure_arm64
		;;
	*) die "unknown architecture $arch (amd64 or arm64)" ;;
	esac
	[[ -f $libdir/libjpeg.a ]] || die "$libdir/libjpeg.a missing: install libjpeg62-turbo-dev for $arch"
	bin=$(mktemp -d)
	log "building static ffcvfs and ffcvfeed for linux/$arch"
	CGO_ENABLED=1 GOOS=linux GOARCH=$arch CC=$cc PKG_CONFIG_PATH=$libdir/pkgconfig \
		go build -trimpath -tags netgo,osusergo -o "$bin/" \
		-ldflags "-s -w -X github.com/ffcvfs/ffcvfs/internal/version.commit=$commit -linkmode external -extldflags -static" \
		./cmd/ffcvfs ./cmd/ffcvfeed
	for p in "$bin"/ffcvfs "$bin"/ffcvfeed; do
		file -b "$p" | grep -q "statically linked" || die "$p is not statically linked: $(file -b "$p")"
	done
	src=$(mktemp -d)
	cp -r python/. "$src"
	rm -rf "$src/build" "$src/ffcvfs.egg-info"
	log "building the wheel for $plat"
	(cd "$src" && FFCVFS_PREBUILT=$bin FFCVFS_PLATFORM=$plat \
		/usr/bin/python3 -m pip wheel --quiet --no-build-isolation --no-deps --no-index -w "$out" .)
	rm -rf "$bin" "$src"
done
ls -l "$out"/*.whl
