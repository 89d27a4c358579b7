#!/usr/bin/env bash
# End-to-end benchmarks, each printed next to its baseline measured in the
# same run, as medians of several runs (the machine is noisy: compare ratios).
#
#   scripts/bench.sh write [N]    ffcvfs write throughput (images/s) on N images
#                                 (default 2000) built from the shared fixture
#                                 photos, vs reading the same files
#   scripts/bench.sh writer [N]   FFCV's DatasetWriter vs ffcvfs.DatasetWriter (2 workers
#                                 each, alternating): N CIFAR-like 32x32 arrays (default
#                                 50000) written raw; 5,000 real photos the dataset gives
#                                 as JPEG bytes (FFCV: as PIL images); the photos as PIL
#                                 images, beside merely iterating the dataset; peak RSS
#   scripts/bench.sh cache        the page cache on a 1 GiB synthetic beton, file
#                                 source with 5 ms added per read, budget 10 %:
#                                 quasi-random plan for 1 and 2 epochs and random
#                                 order without a plan, vs plain sequential reads
#   scripts/bench.sh mount [N]    reading every file of a mounted beton of N images
#                                 (default 2000 fixture photos), 1 and 4 readers,
#                                 warm, vs the same files in a plain folder
#   scripts/bench.sh feed [N]     ffcvfeed on N real photos (default 5000, made by
#                                 scripts/make-bench-data.sh): the pipeline (decode,
#                                 random-resized crop to 160, flip, uint8 batches of
#                                 256, 2 workers), with m/8 DCT scaling and --exact,
#                                 and over a beton with restart intervals (also with
#                                 libjpeg-turbo's entropy decoder), alternating with
#                                 decoding alone (libjpeg-turbo's, and with ffcvfeed's
#                                 entropy decoder), vs FFCV's Loader
#                                 (when it builds here: then also on a beton FFCV's
#                                 own writer made, and that beton converted by
#                                 ffcvfs write --from-beton) and vs torchvision
#                                 ImageFolder + DataLoader (2 workers) doing the same;
#                                 then ffcvfeed's peak RSS after epochs 1, 2 and 5, and
#                                 the rows of decoded (DECODED=0 leaves them out)
#   scripts/bench.sh decoded [N]  ffcvfeed's decoded-image cache on N bench photos
#                                 (default 5000): epoch 1 and epochs 2-4 holding every
#                                 image and half of them, vs no cache, a full decode and
#                                 FFCV's Loader, alternating
#   scripts/bench.sh cifar [N]    FFCV's CIFAR-10 training pipeline on N raw 32x32
#                                 images cut from those photos (default 50000): FFCV's
#                                 Loader vs ffcvfeed vs the limit, a plain loop that
#                                 copies and mirrors the same bytes (tools/rawcopy)
#   scripts/bench.sh legacy [N]   unchanged torchvision code over the mount: ImageFolder +
#                                 RandomResizedCrop(224) + flip + PILToTensor, DataLoader(2
#                                 workers, batches of 64), on N real photos (default 5000),
#                                 warm: the plain folder with shuffle=True (baseline), then
#                                 ffcvfs mount with default flags, with --kernel-cache and
#                                 answering OPEN with direct I/O (--fuse-compat opens, as
#                                 on a kernel without zero-message opens), each with
#                                 shuffle=True and QuasiRandomSampler, epochs
#                                 alternating in one process. Images/s and ratio, the
#                                 mount's CPU per 1,000 files (/proc/PID/stat) and FUSE
#                                 requests per file by opcode (stats.json); then the page
#                                 cache each root holds (fincore) and the mounts' RSS.
#                                 Two more rows read the plain folder and the default
#                                 mount opening files with open(path, "rb", buffering=4096),
#                                 which asks no isatty(): the mount's cost without the
#                                 IOCTL round trip the kernel makes for every isatty().
#                                 With WAYs after N, "NAME|FLAGS" each, those mounts
#                                 instead; FLAGS "bin=PATH ..." use that build:
#                                 bench.sh legacy 5000 "new|" "old|bin=/tmp/ffcvfs-old"
#   scripts/bench.sh metrics [N] what --metrics-addr costs: bench.sh legacy's loader over
#                                 the plain folder, a mount with default flags, and one
#                                 with --metrics-addr scraped every second
#   scripts/bench.sh scan [N]     ImageFolder's start-up scan (the class folders and file
#                                 names, no file opened) of a mounted synthetic beton of
#                                 N samples in 1,000 classes (default 1281167, ImageNet's
#                                 train set) vs a plain folder of the same names as empty
#                                 files; scans alternate, first scan after mounting and
#                                 warm scans; the mount's RSS and FUSE requests
#   scripts/bench.sh storage [N]  training from S3 over a slow link: the same N photos
#                                 (default 5000) on versitygw on loopback, behind
#                                 toxiproxy (+LATENCY_MS, default 10, per response) and a
#                                 cap of BANDWIDTH_MBS (default 100 MB/s) shared by all
#                                 connections. One epoch of every image, bytes only, 4
#                                 readers dealt batches as DataLoader's workers are: one
#                                 GET per image object in random order (baseline), then
#                                 through ffcvfs mount of the beton (2 MiB pages) with a
#                                 cache of 10 % of it (rounded up to whole pages): in
#                                 QuasiRandomSampler's order, in a random order not
#                                 announced, in RandomSampler's (announced) order; the
#                                 ways take turns, run by run. Images/s, MB/s, share of
#                                 the cap, bytes fetched per byte read, GET requests per
#                                 image, the mount's peak RSS, the CPU each process spent
#                                 and the TCP connections opened. Then ffcvfeed bench
#                                 through such a mount vs on the local beton.
#   scripts/bench.sh link [GIB]   the S3 and HTTP paths at the link's speed: a beton of GIB
#                                 GiB (default 1) of the fixture's photos on versitygw and
#                                 on nginx (ranges with sendfile) on loopback, nothing
#                                 shaped; one epoch by 4 readers in QuasiRandomSampler's
#                                 and RandomSampler's orders: GB/s and the mount's CPU
#                                 per GB fetched, beside a reference reader fetching the
#                                 same ranges (nginx's log of the mount's HTTP run) over
#                                 as many connections (storagebench replay)
#   scripts/bench.sh disk [N]     the disk tier: storage's set-up, a RAM cache of 10 %,
#                                 --disk-cache big enough for the beton. Per ORDER
#                                 (default "random quasi-random"; random is not
#                                 announced): three epochs of one mount of S3 with a
#                                 fresh disk cache, then the first epoch of a fresh
#                                 mount of the same object, beside the same mount of the
#                                 beton as a local file (epochs 2 and 3). Images/s,
#                                 bytes fetched from S3 per byte read, ratio to local.
#   scripts/bench.sh cluster [N]  N mounts on this machine stand for N nodes (NODES,
#                                 default "3 8"; BUSY=2 keeps two cores busy) of 2 ranks, over storage's set-up (S3
#                                 behind a 100 MB/s link), each mount with a RAM cache and
#                                 a --disk-cache a little larger than 1/N of the beton:
#                                 the share of the beton fetched from S3 in epochs 1-3,
#                                 global quasi-random orders vs node-affine ones, and
#                                 global ones over the peer tier (--peer-listen on
#                                 127.77.R.K in run R, another placement each run; no
#                                 disk cache; and with the pages a node owns kept on
#                                 its disk cache, little RAM), with
#                                 images/s and RAM per node (KINDS picks;
#                                 CLUSTER_RUNS=K runs each K times, a row each;
#                                 CLUSTER_PROFILE=DIR writes each mount's CPU profile there;
#                                 CLUSTER_DEBUG=1 prints each node's pages owned, storage
#                                 reasons and tiers on stderr). Then a
#                                 simulation, without I/O, of the same at ImageNet's scale
#                                 (1,281,167 samples in pages of about 76, 8 to 64 nodes
#                                 of 8 ranks, move 0 and 0.1): tools/clustersim, the
#                                 orders' own page deal; and the peer tier's shares of
#                                 the pages (clustersim -shares: bounded loads vs a
#                                 plain ring, 3 to 64 nodes)
#
# Environment: RUNS (default 3) runs per figure; BENCH_DIR (default a temp dir;
# for feed and storage, ${FFCVFS_CACHE:-~/.cache/ffcvfs}/bench, so the data is
# kept). storage also reads LATENCY_MS, BANDWIDTH_MBS, BATCH (the readers'
# DataLoader batch size and the mount's --order-batch-size; default 64),
# MAX_SECONDS (each reading way stops after that long; default 30), READERS
# (the mount's --readers; default 64), CACHE and FEED_CACHE (the mount's
# --cache-size for the readers and for ffcvfeed), WAYS (a regular expression:
# only the reading ways whose names match) and FEED=0 (no ffcvfeed runs). link
# reads MAX_SECONDS, BATCH, READERS and CACHE (default 256MiB) as storage
# does, and BENCH_PROFILES (a folder that keeps the mounts' CPU profiles). feed
# reads FFCV_SRC, a checkout of libffcv/ffcv to build FFCV's Loader from
# (default: ${FFCVFS_CACHE:-~/.cache/ffcvfs}/ffcv-src, cloned at $FFCV_COMMIT when
# missing; FFCV=0 leaves FFCV out), and OUTPUTS=0 leaves the output options out.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"

RUNS=${RUNS:-3}

# median: the median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# cpu_model: the CPU's model name, as /proc/cpuinfo gives it.
cpu_model() { awk -F": " '/^model name/ { print $2; exit }' /proc/cpuinfo; }

# rate N CMD...: images/s of CMD over N images, median of RUNS runs.
rate() {
	local n=$1 i s e
	shift
	for ((i = 0; i < RUNS; i++)); do
		s=$(date +%s.%N)
		"$@" >/dev/null
		e=$(date +%s.%N)
		echo "$n / ($e - $s)" | bc -l
	done | median
}

build() {
	ensure_deps
	mkdir -p bin
	go build -o bin/ffcvfs ./cmd/ffcvfs
	go build -o bin/statsq ./tools/statsq
}

bench_write() {
	local n=${1:-2000}
	local dir
	dir=${BENCH_DIR:-$(mktemp -d)}
	photo_folder "$n" "$dir/folder"
	sync
	echo "ffcvfs write: $n real-photo JPEGs (300-650 px), $(nproc) cores, median of $RUNS runs"
	printf '%-48s %10s %8s\n' "what" "images/s" "ratio"
	local base
	base=$(rate "$n" sh -c "cat '$dir'/folder/*/* > /dev/null")
	printf '%-48s %10.0f %8s\n' "baseline: read every file (cat, page cache warm)" "$base" "1.00"
	local name args r
	for name in "jpg (verbatim)|" "jpg --max-resolution 256 (decode+resize+encode)|--max-resolution 256" \
		"raw --max-resolution 256|--mode raw --max-resolution 256" "smart --max-resolution 256|--mode smart --max-resolution 256"; do
		args=${name#*|}
		# shellcheck disable=SC2086
		r=$(rate "$n" bin/ffcvfs write $args "$dir/folder" "$dir/out.beton")
		printf '%-48s %10.0f %8.3f\n' "ffcvfs write ${name%%|*}" "$r" "$(echo "$r / $base" | bc -l)"
	done
	[[ -n ${BENCH_DIR:-} ]] || rm -rf "$dir"
}

# gobench PKG REGEX: run a go benchmark RUNS times and print, per
# sub-benchmark, the median of each metric.
gobench() {
	go test "$1" -run '^$' -bench "$2" -benchtime 1x -count "$RUNS" |
		awk '/^Benchmark/ {
			name = $1; sub(/-[0-9]+$/, "", name); sub(/^Benchmark[^\/]*\//, "", name)
			if (!(name in seen)) { seen[name] = 1; order[++n] = name }
			for (i = 3; i < NF; i += 2) { key = name SUBSEP $(i+1); vals[key] = vals[key] " " $i; if (!((name, $(i+1)) in u)) { u[name, $(i+1)] = 1; units[name] = units[name] " " $(i+1) } }
		}
		function median(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
		END {
			for (i = 1; i <= n; i++) {
				line = sprintf("%-48s", order[i]); k = split(units[order[i]], us, " ")
				for (j = 1; j <= k; j++) if (us[j] != "ns/op") line = line sprintf("  %10.4g %s", median(vals[order[i] SUBSEP us[j]]), us[j])
				print line
			}
		}'
}

# photo_folder N DIR: an ImageFolder of N real photos, the fixture photos
# of testdata/imagefolder-small copied round-robin into their classes.
photo_folder() {
	local n=$1 dir=$2 src i=0 f cls
	src="$(repo_root)/testdata/imagefolder-small"
	[[ -d $src ]] || die "fixture photos not found at $src"
	rm -rf "$dir"
	while ((i < n)); do
		for f in "$src"/*/*; do
			((i < n)) || break
			cls=$(basename "$(dirname "$f")")
			mkdir -p "$dir/$cls"
			cp "$f" "$dir/$cls/$i-$(basename "$f")"
			((i += 1))
		done
	done
}

# readall_rate J DIR: median files/s and MB/s of reading DIR with J readers.
readall_rate() {
	local j=$1 dir=$2 i out
	out=$(for ((i = 0; i < RUNS; i++)); do "$READALL" -j "$j" "$dir"; done)
	printf '%10.0f %10.1f\n' "$(awk '{print $5}' <<<"$out" | median)" "$(awk '{print $7}' <<<"$out" | median)"
}

bench_mount() {
	local n=${1:-2000} dir mnt pid
	dir=${BENCH_DIR:-$(mktemp -d)}
	mnt="$dir/mnt"
	photo_folder "$n" "$dir/folder"
	# The JPEGs as they are: the mount serves the folder's very files.
	bin/ffcvfs write --restart-interval 0 --classes-out "$dir/classes.txt" "$dir/folder" "$dir/data.beton" >/dev/null
	mkdir -p "$mnt"
	READALL="$dir/readall"
	go build -o "$READALL" ./tools/readall
	echo "reading every file: $n real-photo JPEGs, warm, median of $RUNS runs, $(nproc) cores"
	printf '%-52s %10s %10s %8s\n' "what" "files/s" "MB/s" "ratio"
	local mode args base1 base4 r
	"$READALL" "$dir/folder" >/dev/null # warm the kernel page cache
	base1=$(readall_rate 1 "$dir/folder")
	base4=$(readall_rate 4 "$dir/folder")
	printf '%-52s %s %8s\n' "plain folder, 1 reader (baseline)" "$base1" "1.00"
	printf '%-52s %s %8s\n' "plain folder, 4 readers (baseline)" "$base4" "1.00"
	for mode in "mount, default flags|" "mount --kernel-cache|--kernel-cache" "mount --fuse-compat opens|--fuse-compat=opens"; do
		args=${mode#*|}
		# shellcheck disable=SC2086
		bin/ffcvfs mount --cache-size 1GiB --classes "$dir/classes.txt" $args "$dir/data.beton" "$mnt" 2>"$dir/mount.log" &
		pid=$!
		for _ in $(seq 100); do [[ -e $mnt/.ffcvfs/stats.json ]] && break; sleep 0.1; done
		"$READALL" "$mnt" >/dev/null # warm the page cache
		for j in 1 4; do
			r=$(readall_rate "$j" "$mnt")
			local b=$base1
			((j == 4)) && b=$base4
			printf '%-52s %s %8.3f\n' "${mode%%|*}, $j reader(s)" "$r" "$(echo "$(echo "$r" | awk '{print $1}') / $(echo "$b" | awk '{print $1}')" | bc -l)"
		done
		kill -TERM "$pid"
		wait "$pid" || true
	done
	[[ -n ${BENCH_DIR:-} ]] || rm -rf "$dir"
}

# The modes, by concern.
# shellcheck source=scripts/bench/feed.sh
source scripts/bench/feed.sh
# shellcheck source=scripts/bench/legacy.sh
source scripts/bench/legacy.sh
# shellcheck source=scripts/bench/storage.sh
source scripts/bench/storage.sh

case ${1:-} in
scan)
	build
	shift
	bench_scan "$@"
	;;
storage)
	ensure_go
	shift
	bench_storage "$@"
	;;
disk)
	ensure_go
	shift
	bench_disk "$@"
	;;
feed)
	ensure_go
	shift
	bench_feed "$@"
	;;
decoded)
	ensure_go
	shift
	bench_decoded "$@"
	;;
cifar)
	ensure_go
	shift
	bench_cifar "$@"
	;;
mount)
	build
	shift
	bench_mount "$@"
	;;
legacy)
	build
	shift
	bench_legacy "$@"
	;;
metrics)
	build
	shift
	bench_legacy "${1:-5000}" "default flags|" "--metrics-addr, scraped every 1 s|--metrics-addr"
	;;
cluster)
	ensure_go
	shift
	bench_cluster "$@"
	echo
	go run ./tools/clustersim -nodes 8,16,32,64 -ranks 8 -epochs 3
	go run ./tools/clustersim -nodes 8,64 -ranks 8 -epochs 3 -move 0.1 | tail -n 4
	echo
	go run ./tools/clustersim -nodes 3,8,64 -shares 6,34,65,17000 -clusters 200
	;;
link)
	shift
	bench_link "$@"
	;;
cache)
	ensure_deps
	echo "page cache: 1 GiB beton of 8 MiB pages, 4 consumers, budget 10 %, median of $RUNS runs"
	echo "(MB/s of sample data delivered; src/dataset/epoch = bytes read from the source per dataset byte)"
	gobench ./pagecache/ 'BenchmarkCacheEpochs'
	;;
write)
	build
	shift
	bench_write "$@"
	;;
writer)
	ensure_go
	shift
	bench_writer "$@"
	;;
*)
	echo "usage: scripts/bench.sh write [N] | writer [N] | cache | mount [N] | legacy [N] | metrics [N] | scan [N] | feed [N] | cifar [N] | storage [N] | link [GIB] | disk [N] | cluster" >&2
	exit 2
	;;
esac
