#!/usr/bin/env bash
# One command for a training node: a machine with a GPU and many cores.
# The node needs Linux on x86-64, the NVIDIA driver (nvidia-smi), Python 3
# with numpy, PyTorch built with CUDA, and CuPy for the same CUDA major
# version; torchvision and PIL for the DataLoader's training feeds (each
# line says so where missing); FUSE 3 (/dev/fuse, and fusermount3 unless
# root) for the mount's lines. No Go, no compiler, no network. In two steps:
#
#   scripts/device-check.sh --prepare [--cpu-only]   # here, where Go is
#   scripts/device-check.sh [--cpu-only]             # on the node
#
# Between them, copy this repository's tree, device-check/ included, to the
# node (rsync -a ./ node:ffcvfs/, say) and run the second from there.
#
# --prepare builds what the run needs into device-check/ (git-ignored):
# static ffcvfs, ffcvfeed and readall, and, without --cpu-only, ffcvfeed
# built with -tags cuda and the compiled GPU tests of package cudafeed
# (scripts/check-cuda-build.sh installs their headers; libjpeg-turbo is
# linked in, libcuda.so.1 comes from the driver), each xz-compressed; the
# folder stays under 40 MiB, so that it and the tree copy quickly.
#
# The run builds nothing. It unpacks device-check/ into a temporary
# folder, writes two betons of the fixture's real photos (testdata/
# imagefolder-small, 10 times over: 2,000 images) with ffcvfs write, one
# without and one with restart intervals, and prints, as lines to grep:
#
#   ffcvfeed workers=N images/s=X beton=plain|restarts cpu_ms=C busy=B% mhz=M
#       ffcvfeed bench (160 px random-resized crops, uint8) at 1, 2, 4, 8
#       and 16 workers, as many as the machine has cores, with the CPU an
#       image took, the share of the workers' time that was CPU (below
#       100 %: they waited) and the cores' clock at the end;
#   decode workers=N images/s=X
#       the baseline: ffcvfeed decode-bench, full libjpeg-turbo decodes of
#       the plain beton's JPEGs, as many images, at the same counts;
#   decoded workers=N epoch1=X later=Y images/s held=H
#       ffcvfeed bench over the restarts beton with the decoded-image cache
#       holding every image, at 1 worker and at the most: epoch 1 (which
#       fills it) and the median of the later epochs;
#   ffcvfeed workers=N images/s=X beton=ffcv-written|ffcv-converted
#       where --prepare found FFCV's source (bench.sh feed fetches it): the
#       fixture's photos written by FFCV's own DatasetWriter (jpg, quality
#       90), and that beton converted by ffcvfs write --from-beton, at 1
#       worker and at the most;
#   disk MB/s=X
#       the plain beton read with O_DIRECT: the disk's rate;
#   mount readers=N files/s=X MB/s=Y gomaxprocs=P
#       the mount's raw reads of every file at 1 to 16 readers, where
#       /dev/fuse exists (a line says so where not), from a beton in
#       /dev/shm (the photos up to 100 times over), and the cores the
#       mount's Go code ran on at the end (it follows the load);
#   gpu ...
#       without --cpu-only: nvidia-smi's line, the cudafeed tests on the
#       device, and python/check_ffcvfeed_cuda.py: ffcvfeed serve
#       --device cuda:0 read by the Python Loader as CUDA tensors (DLPack
#       into torch), every sample once and equal to the CPU path, and
#       images/s beside the CPU path's batches copied with .cuda();
#   train model=M feed=F images/s=X of_ceiling=P
#       python/train_check.py: ResNet-50 and ResNet-18 (torchvision's, or
#       the same built by the script where torchvision is missing), batch
#       256 at 160 px, bf16 autocast, channels_last, SGD, 200 steps after
#       warm-up, fed by batches already on the GPU (the ceiling), ffcvfeed's
#       CUDA tensors, ffcvfeed's shared memory copied with .cuda(), and
#       torch's DataLoader (ImageFolder, RandomResizedCrop, flip; a worker
#       per core) over an ffcvfs mount of the plain beton and over a folder
#       of the same files. With --cpu-only: a tiny model on the CPU, a few
#       steps, to show the loops run. --no-train leaves the section out.
#
# --cpu-only runs the parts that need no GPU; scripts/test.sh runs it here,
# in CI, with DEVICE_CHECK_IMAGES small. It takes about 5 minutes on the lent
# machine and stops at 9 (DEVICE_CHECK_LIMIT, seconds).
#
# Environment: DEVICE_CHECK_IMAGES (images per ffcvfeed bench run, default
# 20000), DEVICE_CHECK_DIR (default device-check), DEVICE_CHECK_LIMIT (the
# run's limit in seconds, default 540), PYTHON (default python3).
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$(repo_root)
cd "$root"

prepare=0 cpu_only=0 train=1
for a in "$@"; do
	case $a in
	--prepare) prepare=1 ;;
	--cpu-only) cpu_only=1 ;;
	--no-train) train=0 ;;
	-h | --help)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument $a (want --prepare, --cpu-only, --no-train; --help says more)" ;;
	esac
done
dir=${DEVICE_CHECK_DIR:-device-check}
images=${DEVICE_CHECK_IMAGES:-20000}
[[ $images =~ ^[0-9]{1,8}$ ]] && ((10#$images >= 200 && 10#$images <= 10000000)) ||
	die "DEVICE_CHECK_IMAGES=$images: want 200 to 10000000 images per run"
images=$((10#$images))
python=${PYTHON:-python3}
max_folder=$((40 << 20))
# stamp marks a folder --prepare made, the only kind it empties.
stamp=.device-check-folder

# pack FILE...: xz-compress each FILE into $dir as NAME.xz.
pack() {
	local f
	for f in "$@"; do
		xz -T0 -6 -c "$f" >"$dir/$(basename "$f").xz"
	done
}

prepare() {
	step "prepare $dir/ ($( ((cpu_only)) && echo 'CPU only' || echo 'CPU and GPU'))"
	ensure_apt "${FFCVFS_APT_BUILD[@]}" xz-utils file
	ensure_go
	# Emptied only if this script made it: DEVICE_CHECK_DIR may name a
	# folder of the user's.
	if [[ -e $dir || -L $dir ]]; then
		[[ -d $dir && ! -L $dir ]] || die "DEVICE_CHECK_DIR=$dir is not a folder; name a new folder (or one --prepare made)"
		if [[ -n $(ls -A "$dir") && ! -f $dir/$stamp ]]; then
			die "DEVICE_CHECK_DIR=$dir holds files that --prepare did not make (no $stamp in it); it empties only its own folder: name a new one"
		fi
	fi
	rm -rf "$dir"
	mkdir -p "$dir"
	: >"$dir/$stamp"
	local bin
	bin=$(mktemp -d)
	log "building static ffcvfs and ffcvfeed, and readall"
	# The commit, as the wheel's builds say it: a build of several
	# packages with -trimpath may carry no VCS stamp.
	local commit
	commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
	[[ -z $(git status --porcelain --untracked-files=no 2>/dev/null) ]] || commit+="+modified"
	local stamp_flag="-X github.com/ffcvfs/ffcvfs/internal/version.commit=$commit"
	CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo -o "$bin/" \
		-ldflags "-s -w $stamp_flag -linkmode external -extldflags -static" ./cmd/ffcvfs ./cmd/ffcvfeed
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/" ./tools/readall
	for p in "$bin"/ffcvfs "$bin"/ffcvfeed; do
		file -b "$p" | grep -q "statically linked" || die "$p is not statically linked: $(file -b "$p")"
	done
	pack "$bin"/ffcvfs "$bin"/ffcvfeed "$bin"/readall
	# A beton FFCV's own writer made, where FFCV's source is here already
	# (bench.sh feed fetches it; nothing is fetched for this).
	local ffcv= where=${FFCV_SRC:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/ffcv-src}
	if [[ -f $where/setup.py ]]; then
		ffcv=$(ffcv_src) || log "FFCV's source at $where did not build: the run leaves out the FFCV-written beton"
	fi
	if [[ -n $ffcv ]]; then
		log "writing the fixture's photos with FFCV's DatasetWriter"
		/usr/bin/python3 scripts/ffcv_write_imagefolder.py --ffcv "$ffcv" --workers 2 testdata/imagefolder-small "$bin/ffcv-photos.beton" >&2 ||
			die "FFCV's DatasetWriter failed"
		pack "$bin/ffcv-photos.beton"
	else
		[[ -f $where/setup.py ]] ||
			log "no FFCV source at $where (FFCV_SRC names another; scripts/bench.sh feed fetches it): the run leaves out the FFCV-written beton"
	fi
	if ((!cpu_only)); then
		log "building ffcvfeed -tags cuda and the cudafeed GPU tests (scripts/check-cuda-build.sh installs CUDA's headers)"
		bash scripts/check-cuda-build.sh >&2
		# libjpeg-turbo linked in: the GPU machine need not have
		# libjpeg.so.62. A folder holding only the archive comes first
		# in the linker's search.
		local jpeg
		jpeg=$(mktemp -d)
		ln -s /usr/lib/x86_64-linux-gnu/libjpeg.a "$jpeg/libjpeg.a"
		local stubs=/usr/lib/x86_64-linux-gnu/stubs
		CGO_LDFLAGS="-L$jpeg -L$stubs" go build -tags cuda -trimpath -ldflags "-s -w $stamp_flag" -o "$bin/ffcvfeed-cuda" ./cmd/ffcvfeed
		CGO_LDFLAGS="-L$jpeg -L$stubs" go test -tags cuda -c -trimpath -ldflags "-s -w" -o "$bin/cudafeed-cuda.test" ./cudafeed/
		rm -rf "$jpeg"
		if readelf -d "$bin/ffcvfeed-cuda" | grep -q 'NEEDED.*libjpeg'; then
			die "$bin/ffcvfeed-cuda links libjpeg dynamically"
		fi
		pack "$bin"/ffcvfeed-cuda "$bin"/cudafeed-cuda.test
	fi
	rm -rf "$bin"
	local size
	size=$(du -sb "$dir" | cut -f1)
	((size <= max_folder)) || die "$dir holds $size bytes, more than $max_folder"
	ls -l "$dir"
	echo "prepared $dir: $((size >> 20)) MiB; run scripts/device-check.sh$( ((cpu_only)) && echo ' --cpu-only') where it is to run"
}

((prepare)) && {
	prepare
	exit 0
}

# --- the run: no Go, nothing fetched ---

[[ -d $dir ]] || die "no $dir/: run scripts/device-check.sh --prepare$( ((cpu_only)) && echo ' --cpu-only') first (where Go is), and carry $dir to this machine"
start=$SECONDS
limit=${DEVICE_CHECK_LIMIT:-540}
# At most 5 digits before any arithmetic: bash's wraps past 2^63.
[[ $limit =~ ^[0-9]{1,5}$ ]] && ((10#$limit >= 10 && 10#$limit <= 86400)) ||
	die "DEVICE_CHECK_LIMIT=$limit: want 10 to 86400 seconds"
limit=$((10#$limit))
# The limit holds within a step too: the run goes on under timeout(1),
# which ends it and every process it started (its process group) then.
if [[ -z ${_DEVICE_CHECK_TIMED:-} ]]; then
	rc=0
	_DEVICE_CHECK_TIMED=1 timeout -k 10 "$limit" bash "$0" "$@" || rc=$?
	((rc != 124)) || echo "device-check: the run took its $limit s (DEVICE_CHECK_LIMIT); stopped" >&2
	exit "$rc"
fi
work=$(mktemp -d)
mnt= shm=
cleanup() {
	if [[ -n $mnt ]] && grep -q " $mnt " /proc/mounts 2>/dev/null; then
		"$work/ffcvfs" umount "$mnt" >/dev/null 2>&1 || umount -l "$mnt" 2>/dev/null || true
	fi
	rm -rf "$work"
	[[ -z $shm ]] || rm -rf "$shm"
}
trap cleanup EXIT
trap 'exit 143' TERM INT # the EXIT trap then cleans up

# unpack NAME: $dir/NAME.xz into $work/NAME, executable.
unpack() {
	"$python" -c 'import lzma, shutil, sys
with lzma.open(sys.argv[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$dir/$1.xz" "$work/$1"
	chmod +x "$work/$1"
}

# in_time: fails once the run has taken its limit.
in_time() {
	((SECONDS - start < limit)) || die "the run took its ${limit} s; stopping"
}

step "machine"
cores=$(nproc)
echo "cores=$cores cpu=\"$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)\" memory=$(awk '/^MemTotal/ { print int($2 / 1024) }' /proc/meminfo)MiB"
for p in ffcvfs ffcvfeed readall; do
	[[ -f $dir/$p.xz ]] || die "$dir/$p.xz missing: prepare again"
	unpack "$p"
done
"$work/ffcvfs" version | sed -n 1p

step "betons: the fixture's photos ten times over, without and with restart intervals"
tree=$work/tree
photos=$root/testdata/imagefolder-small
[[ -d $photos ]] || die "$photos missing"
for copy in $(seq 0 9); do
	for cls in "$photos"/*/; do
		c=$(basename "$cls")
		mkdir -p "$tree/$c"
		for f in "$cls"*; do
			ln -s "$f" "$tree/$c/$copy-$(basename "$f")"
		done
	done
done
"$work/ffcvfs" write --restart-interval 0 "$tree" "$work/plain.beton" | tail -1
"$work/ffcvfs" write --restart-interval 4 "$tree" "$work/restarts.beton" | tail -1
n=$(find -L "$tree" -type f | wc -l)
epochs=$(((images + n - 1) / n))

# cost OUTPUT: from ffcvfeed bench's output, the CPU an image took, the
# share of the workers' time that was CPU (below 100: they waited) and
# the cores' clock, as cpu_ms=X busy=P% mhz=M: a pipeline that waits tells
# from cores that slow down.
cost() {
	local ms busy mhz
	ms=$(sed -n 's/^total: .*, \([0-9.]*\) ms an image$/\1/p' <<<"$1")
	busy=$(sed -n 's/^runtime: .* (\([0-9]*\) %).*/\1/p' <<<"$1")
	mhz=$(sed -n 's/^runtime: .*cores at \([0-9]*\) MHz.*/\1/p' <<<"$1")
	echo "cpu_ms=${ms:-?} busy=${busy:-?}% mhz=${mhz:-?}"
}

step "ffcvfeed bench: $((epochs * n)) images a run, 160 px random-resized crops"
counts=()
for w in 1 2 4 8 16; do
	((w <= cores)) && counts+=("$w")
done
for w in "${counts[@]}"; do
	for b in plain restarts; do
		in_time
		out=$("$work/ffcvfeed" bench --data "$work/$b.beton" --workers "$w" --epochs "$epochs" --resolution 160 2>&1) ||
			die "ffcvfeed bench --workers $w on $b.beton failed: $out"
		rate=$(sed -n 's/^total: .* \([0-9.]*\) images\/s.*/\1/p' <<<"$out")
		[[ -n $rate ]] || die "no total in ffcvfeed bench's output: $out"
		echo "ffcvfeed workers=$w images/s=$rate beton=$b $(cost "$out")"
	done
done

step "decoding alone: full libjpeg-turbo decodes of the plain beton's JPEGs"
for w in "${counts[@]}"; do
	in_time
	out=$("$work/ffcvfeed" decode-bench --data "$work/plain.beton" --workers "$w" --passes "$epochs" 2>&1) ||
		die "ffcvfeed decode-bench --workers $w failed: $out"
	rate=$(sed -n 's/^decode-only: .* \([0-9.]*\) images\/s.*/\1/p' <<<"$out")
	[[ -n $rate ]] || die "no figure in ffcvfeed decode-bench's output: $out"
	echo "decode workers=$w images/s=$rate"
done

step "the decoded-image cache (--decoded-cache-size): epoch 1 fills it, the later ones read it"
depochs=$((epochs > 2 ? epochs : 2))
for w in 1 "${counts[-1]}"; do
	in_time
	out=$("$work/ffcvfeed" bench --data "$work/restarts.beton" --workers "$w" --epochs "$depochs" --resolution 160 --decoded-cache-size 8GiB 2>&1) ||
		die "ffcvfeed bench --decoded-cache-size --workers $w failed: $out"
	first=$(sed -n 's/^epoch 0: ffcvfeed bench: .* \([0-9.]*\) images\/s.*/\1/p' <<<"$out")
	later=$(sed -n 's/^epoch [1-9][0-9]*: ffcvfeed bench: .* \([0-9.]*\) images\/s.*/\1/p' <<<"$out" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	held=$(sed -n 's/^epoch 0: decoded-image cache: .*holds \([0-9]*\) images.*/\1/p' <<<"$out")
	[[ -n $first && -n $later ]] || die "no epoch figures in ffcvfeed bench's output: $out"
	echo "decoded workers=$w epoch1=$first later=$later images/s held=$held"
done

if [[ -f $dir/ffcv-photos.beton.xz ]]; then
	step "a beton FFCV wrote, and it converted by ffcvfs write --from-beton"
	unpack ffcv-photos.beton
	"$work/ffcvfs" write --from-beton "$work/ffcv-photos.beton" "$work/ffcv-converted.beton" | sed -n 2p
	fn=$("$work/ffcvfs" info "$work/ffcv-photos.beton" | awk '$1 == "samples" { print $2; exit }')
	fepochs=$(((images + fn - 1) / fn))
	for w in 1 "${counts[-1]}"; do
		for b in ffcv-photos:ffcv-written ffcv-converted:ffcv-converted; do
			in_time
			out=$("$work/ffcvfeed" bench --data "$work/${b%%:*}.beton" --workers "$w" --epochs "$fepochs" --resolution 160 2>&1) ||
				die "ffcvfeed bench --workers $w on ${b%%:*}.beton failed: $out"
			rate=$(sed -n 's/^total: .* \([0-9.]*\) images\/s.*/\1/p' <<<"$out")
			echo "ffcvfeed workers=$w images/s=$rate beton=${b#*:} $(cost "$out")"
		done
	done
else
	echo "ffcv-written: left out, no $dir/ffcv-photos.beton.xz (--prepare found no FFCV source at FFCV_SRC, or it did not build: see its log)"
fi

step "the mount's raw reads"
if [[ ! -e /dev/fuse ]]; then
	echo "mount: skipped, no /dev/fuse on this machine"
elif ((EUID != 0)) && ! command -v fusermount3 >/dev/null 2>&1; then
	echo "mount: skipped, not root and no fusermount3"
else
	# What the mount's serving costs, not the disk's: the beton (the photos
	# up to 100 times over, as DEVICE_CHECK_IMAGES allows, so that a run
	# lasts long enough for the mount's processors to follow the load) in
	# /dev/shm where it has room, the disk's own rate on a line of its own.
	# A mount of its own for each count: the first reads of every file,
	# not the kernel's copies of an earlier pass.
	if out=$(dd if="$work/plain.beton" of=/dev/null bs=8M iflag=direct 2>&1); then
		echo "disk MB/s=$(awk '/copied/ { v = $(NF-1); u = $NF; if (u == "GB/s") v *= 1000; if (u == "kB/s") v /= 1000; print v }' <<<"$out") (the beton read with O_DIRECT)"
	else
		echo "disk: no O_DIRECT read of the beton here ($(tail -1 <<<"$out"))"
	fi
	copies=$((images / 2000))
	copies=$((copies < 1 ? 1 : copies > 10 ? 10 : copies))
	raw=$work/plain.beton
	size=$(stat -c %s "$raw")
	if [[ -d /dev/shm ]] && (($(df --output=avail -B1 /dev/shm | tail -1) > 4 * size * copies)); then
		shm=$(mktemp -d /dev/shm/ffcvfs-device-check.XXXXXX)
		if ((copies > 1)); then
			"$python" - "$tree" "$work/big" "$copies" <<'EOF'
import os, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for c in os.listdir(src):
    os.makedirs(os.path.join(dst, c))
    for f in os.listdir(os.path.join(src, c)):
        for k in range(n):
            os.symlink(os.path.realpath(os.path.join(src, c, f)), os.path.join(dst, c, f"{k}-{f}"))
EOF
			"$work/ffcvfs" write --restart-interval 0 "$work/big" "$shm/mount.beton" | tail -1
		else
			cp "$raw" "$shm/mount.beton"
		fi
		raw=$shm/mount.beton
	else
		echo "mount: /dev/shm lacks room; the mount reads the beton from $work (its disk's rate counts)"
	fi
	mnt=$work/mnt
	mkdir -p "$mnt"
	for r in 1 2 4 8 16; do
		((r <= cores)) || continue
		in_time
		if ! "$work/ffcvfs" mount --background --cache-size 1GiB "$raw" "$mnt" >"$work/mount.log" 2>&1; then
			echo "mount: failed: $(tail -1 "$work/mount.log")"
			break
		fi
		out=$("$work/readall" -j "$r" "$mnt")
		procs=$(grep -o '"gomaxprocs": *[0-9]*' "$mnt/.ffcvfs/stats.json" | grep -o '[0-9]*$' || echo '?')
		echo "mount readers=$r $(sed -n 's/.* \([0-9.]*\) files\/s.* \([0-9.]*\) MB\/s.*/files\/s=\1 MB\/s=\2/p' <<<"$out") gomaxprocs=$procs"
		"$work/ffcvfs" umount "$mnt"
	done
	mnt=
	[[ -n ${shm:-} ]] && rm -rf "$shm"
	shm=
fi

# train_section [--cpu-only]: python/train_check.py: ffcvfeed over the
# beton with restart intervals (what ffcvfs write makes by default), the
# DataLoader over a mount of the plain beton (its files are the source's,
# byte for byte) and over a folder of the same files.
train_section() {
	((train)) || {
		echo "train: left out (--no-train)"
		return 0
	}
	step "training: the GPU's ceiling beside ffcvfeed and DataLoader feeds"
	in_time
	local folder=$work/folder tmnt=$work/train-mnt cuda=()
	cp -rL "$tree" "$folder"
	mkdir -p "$tmnt"
	[[ -f $work/ffcvfeed-cuda ]] && cuda=(--ffcvfeed-cuda "$work/ffcvfeed-cuda")
	local mounted=()
	if [[ -e /dev/fuse ]] && "$work/ffcvfs" mount --background "$work/plain.beton" "$tmnt" >"$work/train-mount.log" 2>&1; then
		mnt=$tmnt
		mounted=(--mount "$tmnt")
	else
		echo "train: no mount ($(tail -1 "$work/train-mount.log" 2>/dev/null || echo 'no /dev/fuse')): dataloader-mount left out"
	fi
	local rc=0
	"$python" "$root/python/train_check.py" --ffcvfeed "$work/ffcvfeed" "${cuda[@]}" --data "$work/restarts.beton" \
		"${mounted[@]}" --folder "$folder" "$@" || rc=$?
	if [[ -n $mnt ]]; then
		"$work/ffcvfs" umount "$mnt"
		mnt=
	fi
	((rc == 0)) || {
		echo "train: FAILED (exit $rc)"
		failed=1
	}
}

if ((cpu_only)); then
	train_section --cpu-only
	((${failed:-0} == 0)) || die "the training section failed (above)"
	echo
	echo "device-check: CPU parts done in $((SECONDS - start)) s"
	exit 0
fi

step "GPU"
for p in ffcvfeed-cuda cudafeed-cuda.test; do
	[[ -f $dir/$p.xz ]] || die "$dir/$p.xz missing: prepare without --cpu-only"
	unpack "$p"
done
if command -v nvidia-smi >/dev/null 2>&1; then
	echo "gpu $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
else
	echo "gpu: nvidia-smi not found"
fi
"$python" -c 'import numpy, torch, cupy
assert torch.cuda.is_available(), "torch sees no GPU"
print("gpu python: numpy", numpy.__version__, "torch", torch.__version__, "CUDA", torch.version.cuda, "cupy", cupy.__version__)' ||
	die "$python must import numpy, torch with CUDA, and cupy"
in_time
step "cudafeed's tests on the device"
if (cd "$root/cudafeed" && "$work/cudafeed-cuda.test" -test.v -test.count=1); then
	echo "gpu cudafeed tests: ok"
else
	echo "gpu cudafeed tests: FAILED"
	failed=1
fi
in_time
step "python/check_ffcvfeed_cuda.py: the Loader's CUDA tensors"
if "$python" "$root/python/check_ffcvfeed_cuda.py" --bin "$work/ffcvfeed-cuda" --cpu-bin "$work/ffcvfeed" \
	--data "$work/plain.beton" --resolution 160 --bench-epochs 3; then
	echo "gpu loader checks: ok"
else
	echo "gpu loader checks: FAILED"
	failed=1
fi
in_time
train_section
echo
echo "device-check: done in $((SECONDS - start)) s"
((${failed:-0} == 0)) || die "a GPU check failed (above)"
