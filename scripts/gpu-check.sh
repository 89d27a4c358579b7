#!/usr/bin/env bash
# Checks ffcvfeed's CUDA delivery on a machine with an NVIDIA GPU, with
# binaries built elsewhere (scripts/check-cuda-build.sh builds them); it
# builds nothing:
#
#   scripts/gpu-check.sh FFCVFEED_CUDA BETON [FFCVFEED_CPU]
#
#   FFCVFEED_CUDA  ffcvfeed built with -tags cuda (bin/ffcvfeed-cuda)
#   BETON          a small beton (a few thousand images at most)
#   FFCVFEED_CPU   an ffcvfeed for the CPU runs (default: FFCVFEED_CUDA, whose
#                  --device cpu is the CPU path)
#
# It runs, in order:
#   1. the Go GPU tests of package cudafeed, if their compiled binary is there
#      ($CUDAFEED_TEST, default bin/cudafeed-cuda.test): device slots filled
#      by asynchronous copies, compared with cuMemcpyDtoH, and read by another
#      process through IPC handles;
#   2. python/check_ffcvfeed_cuda.py: serve --device cuda:0 read through CuPy
#      and DLPack into torch, every sample once with its label, pixels equal
#      to serve --device cpu with the same seed, and throughput with the
#      consumer idle (img/s).
#
# Environment: PYTHON (default python3) must import numpy, torch (with CUDA)
# and cupy. Extra options for the Python check go in GPU_CHECK_ARGS, e.g.
# GPU_CHECK_ARGS="--resolution 160 --bench-epochs 5".
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$(repo_root)

(($# == 2 || $# == 3)) || die "usage: $0 FFCVFEED_CUDA BETON [FFCVFEED_CPU]"
abs() { (cd "$(dirname "$1")" && printf '%s/%s\n' "$(pwd)" "$(basename "$1")"); }
bin=$(abs "$1")
data=$(abs "$2")
cpu_bin=$(abs "${3:-$1}")
[[ -x $bin ]] || die "$bin: not an executable (build it with scripts/check-cuda-build.sh)"
[[ -x $cpu_bin ]] || die "$cpu_bin: not an executable"
[[ -f $data ]] || die "$data: no such beton"
python=${PYTHON:-python3}

step "GPU"
if command -v nvidia-smi >/dev/null 2>&1; then
	nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total --format=csv,noheader
else
	log "nvidia-smi not found; going on"
fi
"$python" -c 'import numpy, torch, cupy
assert torch.cuda.is_available(), "torch sees no GPU"
print("numpy", numpy.__version__, "| torch", torch.__version__, "CUDA", torch.version.cuda, "| cupy", cupy.__version__)' ||
	die "$python must import numpy, torch with CUDA, and cupy (pip install cupy-cuda12x or cupy-cuda11x)"

step "Go GPU tests (cudafeed)"
go_test=${CUDAFEED_TEST:-$root/bin/cudafeed-cuda.test}
if [[ -x $go_test ]]; then
	# Run from the package folder, as go test would.
	(cd "$root/cudafeed" && "$go_test" -test.v -test.count=1) || die "the Go GPU tests failed"
else
	log "no $go_test (scripts/check-cuda-build.sh leaves it in bin/): skipping the Go GPU tests"
fi

step "python/check_ffcvfeed_cuda.py"
# shellcheck disable=SC2086 # GPU_CHECK_ARGS is a list of options
"$python" "$root/python/check_ffcvfeed_cuda.py" --bin "$bin" --cpu-bin "$cpu_bin" --data "$data" ${GPU_CHECK_ARGS:-}
