#!/usr/bin/env bash
# Checks that ffcvfeed builds with its GPU delivery path (-tags cuda) on a
# machine without a GPU: installs Debian 12's CUDA headers and driver stub
# (nvidia-cuda-dev, about 1.5 GB with its dependencies, from the non-free
# component; the script enables contrib, non-free and non-free-firmware in
# /etc/apt/sources.list.d/debian.sources), then runs go vet -tags cuda,
# builds bin/ffcvfeed-cuda, and compiles the GPU tests into
# bin/cudafeed-cuda.test and bin/ffcvfeed-cuda.test. Not part of
# scripts/test.sh or CI. Run it as root (or with sudo available).
#
#   scripts/check-cuda-build.sh
#
# Linking: nvidia-cuda-dev ships the stub /usr/lib/x86_64-linux-gnu/stubs/
# libcuda.so and pulls in libcuda1 (the driver's user-space library,
# libcuda.so.1); the stub is linked, the binary then needs libcuda.so.1.
#
# Without a GPU the binaries cannot run, not even for --help: either the
# dynamic loader finds no libcuda.so.1, or (libcuda1 installed, as here)
# gorgonia.org/cu's init gets CUDA_ERROR_NO_DEVICE from cuInit, prints
# "Error in initialization, ... NoDevice" and exits with status 1. Run them
# on a machine with a GPU: scripts/device-check.sh (--prepare builds them
# for it).
#
# Environment:
#   CUDA_STUBS   folder holding the libcuda.so to link against (default: the
#                first of the known stub folders that has one)
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$(repo_root)
cd "$root"

# Debian 12 packages of the CUDA build: cuda.h and the libcuda.so stub.
# nvidia-cuda-dev is in non-free; some of its dependencies are in contrib.
cuda_packages=(nvidia-cuda-dev gcc pkg-config libjpeg62-turbo-dev)
components=(main contrib non-free non-free-firmware)

# enable_components FILE: add the missing ones of $components to every
# Components: line of a deb822 sources file. Idempotent: a second run
# changes nothing.
enable_components() {
	local file=$1 tmp
	tmp=$(mktemp)
	awk -v want="${components[*]}" '
		/^Components:/ {
			n = split(want, w, " ")
			line = $0
			for (i = 1; i <= n; i++) {
				have = 0
				for (j = 2; j <= NF; j++) if ($j == w[i]) have = 1
				if (!have) line = line " " w[i]
			}
			print line
			next
		}
		{ print }
	' "$file" >"$tmp"
	if cmp -s "$file" "$tmp"; then
		rm -f "$tmp"
		return 1
	fi
	as_root cp "$tmp" "$file"
	rm -f "$tmp"
	return 0
}

step "apt components: ${components[*]}"
sources=/etc/apt/sources.list.d/debian.sources
[[ -f $sources ]] ||
	die "$sources not found: this script expects Debian 12's deb822 sources; enable the contrib and non-free components by hand, then rerun it"
if enable_components "$sources"; then
	log "enabled ${components[*]} in $sources"
	as_root apt-get update -q || die "apt-get update failed"
	_FFCVFS_APT_UPDATED=1
else
	log "$sources already lists ${components[*]}"
fi

step "packages: ${cuda_packages[*]}"
ensure_apt "${cuda_packages[@]}"
ensure_go
go version

# The stub libcuda.so: only for linking; the driver's libcuda.so.1 replaces it
# at run time.
stubs=${CUDA_STUBS:-}
if [[ -z $stubs ]]; then
	for d in /usr/lib/x86_64-linux-gnu/stubs /usr/lib/x86_64-linux-gnu /usr/local/cuda/lib64/stubs /usr/local/cuda/lib64; do
		if [[ -e $d/libcuda.so ]]; then
			stubs=$d
			break
		fi
	done
fi
[[ -n $stubs && -e $stubs/libcuda.so ]] ||
	die "no libcuda.so to link against (looked in the stubs folders of nvidia-cuda-dev and /usr/local/cuda); set CUDA_STUBS to its folder"
[[ -f /usr/include/cuda.h || -f /usr/local/cuda/include/cuda.h ]] || die "cuda.h not found: is nvidia-cuda-dev installed?"
log "linking against $stubs/libcuda.so ($(dpkg -S "$stubs/libcuda.so" 2>/dev/null | cut -d: -f1 || echo 'no package'))"
export CGO_LDFLAGS="${CGO_LDFLAGS:-} -L$stubs"

step "the default build links no CUDA"
if go list -deps ./cmd/ffcvfeed | grep -q '^gorgonia.org/cu'; then
	die "the default build of ./cmd/ffcvfeed imports gorgonia.org/cu: only files built with -tags cuda may"
fi
echo "go list -deps ./cmd/ffcvfeed: no gorgonia.org/cu"

step "gofmt (CUDA files)"
unformatted=$(gofmt -l cudafeed cmd/ffcvfeed)
[[ -z $unformatted ]] || die "gofmt would change: $unformatted"
echo "gofmt: clean"

step "go vet -tags cuda ./..."
go vet -tags cuda ./...
echo "go vet -tags cuda: clean"

step "go test -tags cuda -c (compile and link the GPU tests; they run only on a GPU machine)"
mkdir -p bin
go test -tags cuda -c -o bin/cudafeed-cuda.test ./cudafeed/
go test -tags cuda -c -o bin/ffcvfeed-cuda.test ./cmd/ffcvfeed/
ls -l bin/cudafeed-cuda.test bin/ffcvfeed-cuda.test

step "go build -tags cuda -o bin/ffcvfeed-cuda ./cmd/ffcvfeed"
go build -tags cuda -o bin/ffcvfeed-cuda ./cmd/ffcvfeed
ls -l bin/ffcvfeed-cuda
if command -v readelf >/dev/null 2>&1; then
	readelf -d bin/ffcvfeed-cuda | grep -E 'NEEDED.*libcuda' ||
		die "bin/ffcvfeed-cuda does not link libcuda"
fi
if go version -m bin/ffcvfeed-cuda | grep -q 'gorgonia.org/cu'; then
	go version -m bin/ffcvfeed-cuda | grep -E 'build\s+-tags=|dep\s+gorgonia.org/cu'
else
	die "bin/ffcvfeed-cuda does not contain gorgonia.org/cu"
fi

echo
echo "check-cuda-build: OK: bin/ffcvfeed-cuda and bin/cudafeed-cuda.test built with -tags cuda; they run only where"
echo "an NVIDIA driver and a GPU are: scripts/device-check.sh --prepare, then scripts/device-check.sh there"
