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

# images_per_s: the images/s figure of the last line of stdin that has one
# ("... N images in S s: R images/s ...").
images_per_s() {
	sed -n 's|.* \([0-9.][0-9.]*\) images/s.*|\1|p' | tail -n 1
}

# steady_rate CMD...: the median images/s of the epochs after the first that
# CMD, an ffcvfeed bench run, prints.
steady_rate() {
	local out
	out=$("$@") || die "$* failed"
	sed -n 's|^epoch \([0-9]*\):.* \([0-9.][0-9.]*\) images/s.*|\1 \2|p' <<<"$out" | awk '$1 > 0 {print $2}' | median
}

# rate_of CMD...: the median over RUNS runs of the images/s that CMD prints.
rate_of() {
	local i out r
	for ((i = 0; i < RUNS; i++)); do
		out=$("$@") || die "$* failed"
		r=$(images_per_s <<<"$out")
		[[ -n $r ]] || die "no images/s figure in the output of $*:"$'\n'"$out"
		echo "$r"
	done | median
}

# epoch_peaks_mib EPOCHS CMD...: for each epoch, the median over RUNS runs of
# the peak resident size (MiB) that CMD, an ffcvfeed bench run for EPOCHS
# epochs, prints after that epoch; one line per epoch.
epoch_peaks_mib() {
	local epochs=$1 i e out
	shift
	local -a peaks=()
	for ((i = 0; i < RUNS; i++)); do
		out=$("$@" --epochs "$epochs") || die "$* failed"
		for ((e = 0; e < epochs; e++)); do
			peaks[e]+="$(sed -n "s|^epoch $e: .*peak \([0-9.]*\) MiB).*|\1|p" <<<"$out") "
		done
	done
	for ((e = 0; e < epochs; e++)); do
		[[ -n ${peaks[e]// /} ]] || die "no peak RSS for epoch $e in the output of $*:"$'\n'"$out"
		tr ' ' '\n' <<<"${peaks[e]}" | sed '/^$/d' | median
	done
}

# decode_rate BETON [FLAGS...]: the images/s of ffcvfeed decode-bench with
# 2 workers.
decode_rate() {
	local out
	out=$(bin/ffcvfeed decode-bench --data "$1" --workers 2 "${@:2}") || die "ffcvfeed decode-bench failed"
	images_per_s <<<"$out"
}

bench_feed() {
	local n=${1:-5000}
	[[ $n =~ ^[0-9]+$ ]] || die "N must be a whole number, got '$n'"
	local dir=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}/feed-$n
	ensure_apt python3-torchvision python3-pil
	scripts/make-bench-data.sh "$n" "$dir" >&2 || die "make-bench-data.sh failed"
	go build -o bin/ffcvfeed ./cmd/ffcvfeed || die "go build ./cmd/ffcvfeed failed"
	local beton=$dir/bench.beton folder=$dir/imagefolder
	local pipe=(--resolution 160 --crop random-resized --flip 0.5 --dtype uint8 --workers 2 --batch-size 256)
	echo
	echo "ffcvfeed: $n real-photo JPEGs (shorter side 300-500 px), 2 workers, $(nproc) cores ($(cpu_model)), median of $RUNS runs"
	echo "decode: full libjpeg-turbo decode of every image (all in memory), and the same with ffcvfeed's entropy"
	echo "decoder. pipeline: random-resized crop to 160x160, flip 0.5, uint8 batches of 256, epochs 2-3 of a"
	echo "3-epoch run (steady), decoding each crop at the smallest DCT scale m/8 that keeps 160 pixels, or in full"
	echo "with --exact; over a beton written with --restart-interval 4, with ffcvfeed's entropy decoder (the"
	echo "default) and libjpeg-turbo's. They alternate; each run measures the baseline before and after its rows and"
	echo "takes the mean (this machine's speed drifts within a run); the ratio is the median of each run's ratio to it."
	echo "FFCV's Loader (built from Debian's Numba and OpenCV) reads the same beton from the page cache in random"
	echo "order, epochs 2-3 of 3. torchvision does the same"
	echo "crop with ImageFolder + DataLoader, one epoch (its time includes starting its workers)."
	echo "peak RSS: the process's peak resident size after each epoch of one 5-epoch ffcvfeed bench run."
	printf '%-52s %10s %-9s %8s\n' "what" "value" "unit" "ratio"
	# The same images with restart markers every ~4 MCUs (ffcvfs write
	# --restart-interval 4): the same pixels, crops entropy-decoded only
	# where they lie.
	local rbeton
	rbeton=$(restart_beton "$dir" "$folder")
	local base r i b b2 p x q k e l
	local -a bases pipes exacts rsts rp rx rq ents ltrs re rl
	# The output options, each run beside the uint8 NHWC pipeline.
	local outs=("--layout nchw" "--dtype float16" "--dtype float16 --layout nchw" "--dtype float16 --normalize imagenet"
		"--dtype float16 --layout nchw --normalize imagenet" "--dtype float32" "--dtype float32 --layout nchw"
		"--dtype float32 --normalize imagenet" "--dtype float32 --layout nchw --normalize imagenet")
	local -A orate oratio
	bin/ffcvfeed decode-bench --data "$beton" --workers 2 >/dev/null || die "ffcvfeed decode-bench failed" # warm the page cache
	bin/ffcvfeed decode-bench --data "$rbeton" --workers 2 >/dev/null || die "ffcvfeed decode-bench failed"
	for ((i = 0; i < RUNS; i++)); do
		b=$(decode_rate "$beton")
		p=$(steady_rate bin/ffcvfeed bench --data "$beton" "${pipe[@]}" --epochs 3)
		x=$(steady_rate bin/ffcvfeed bench --data "$beton" "${pipe[@]}" --exact --epochs 3)
		q=$(steady_rate bin/ffcvfeed bench --data "$rbeton" "${pipe[@]}" --epochs 3)
		e=$(decode_rate "$beton" --entropy-decoder ffcvfeed)
		l=$(steady_rate bin/ffcvfeed bench --data "$rbeton" "${pipe[@]}" --entropy-decoder libjpeg --epochs 3)
		b2=$(decode_rate "$beton")
		[[ -n $b && -n $b2 && -n $p && -n $x && -n $q && -n $e && -n $l ]] || die "no images/s figure from ffcvfeed decode-bench or bench"
		b=$(echo "($b + $b2) / 2" | bc -l)
		ents+=("$e") ltrs+=("$l") re+=("$(echo "$e / $b" | bc -l)") rl+=("$(echo "$l / $b" | bc -l)")
		[[ ${OUTPUTS:-1} == 0 ]] && outs=()
		for k in "${!outs[@]}"; do
			# shellcheck disable=SC2086 # the options are words without spaces
			r=$(steady_rate bin/ffcvfeed bench --data "$beton" "${pipe[@]}" ${outs[k]} --epochs 3)
			[[ -n $r ]] || die "no images/s figure from ffcvfeed bench ${outs[k]}"
			orate[$k]+="$r " oratio[$k]+="$(echo "$r / $p" | bc -l) "
		done
		bases+=("$b") pipes+=("$p") exacts+=("$x") rsts+=("$q")
		rp+=("$(echo "$p / $b" | bc -l)") rx+=("$(echo "$x / $b" | bc -l)") rq+=("$(echo "$q / $b" | bc -l)")
	done
	base=$(printf '%s\n' "${bases[@]}" | median)
	printf '%-52s %10.0f %-9s %8s\n' "ffcvfeed decode-bench --workers 2 (baseline)" "$base" "images/s" "1.00"
	printf '%-52s %10.0f %-9s %8.3f\n' "decode-bench --entropy-decoder ffcvfeed" "$(printf '%s\n' "${ents[@]}" | median)" "images/s" "$(printf '%s\n' "${re[@]}" | median)"
	printf '%-52s %10.0f %-9s %8.3f\n' "ffcvfeed bench (pipeline, m/8 scaling)" "$(printf '%s\n' "${pipes[@]}" | median)" "images/s" "$(printf '%s\n' "${rp[@]}" | median)"
	printf '%-52s %10.0f %-9s %8.3f\n' "ffcvfeed bench --exact (pipeline, full-size crops)" "$(printf '%s\n' "${exacts[@]}" | median)" "images/s" "$(printf '%s\n' "${rx[@]}" | median)"
	printf '%-52s %10.0f %-9s %8.3f\n' "ffcvfeed bench, beton with --restart-interval 4" "$(printf '%s\n' "${rsts[@]}" | median)" "images/s" "$(printf '%s\n' "${rq[@]}" | median)"
	printf '%-52s %10.0f %-9s %8.3f\n' "  the same, --entropy-decoder libjpeg" "$(printf '%s\n' "${ltrs[@]}" | median)" "images/s" "$(printf '%s\n' "${rl[@]}" | median)"
	echo "  per run, decode / m/8 / exact / restarts images/s: $(for ((i = 0; i < RUNS; i++)); do printf '%.0f/%.0f/%.0f/%.0f ' "${bases[i]}" "${pipes[i]}" "${exacts[i]}" "${rsts[i]}"; done)"
	echo "  per run, restart intervals over the decode: $(for ((i = 0; i < RUNS; i++)); do printf '%.3f ' "${rq[i]}"; done)"
	echo "the two entropy decoders alternating image by image, one goroutine (tools/entropyab):"
	go run ./tools/entropyab -folder "$folder" -rounds "$RUNS" | sed 's/^/  /' || die "tools/entropyab failed"
	[[ ${OUTPUTS:-1} == 0 ]] || echo "output options, the pipeline above (uint8 NHWC) with each; ratio: median of each run's ratio to uint8 NHWC"
	for k in "${!outs[@]}"; do
		# shellcheck disable=SC2086 # a list of numbers
		printf '%-52s %10.0f %-9s %8.3f\n' "  ${outs[k]}" "$(printf '%s\n' ${orate[$k]} | median)" "images/s" "$(printf '%s\n' ${oratio[$k]} | median)"
	done
	local m0 m1
	m0=$(bin/ffcvfs info "$beton" | awk '/^image field/ { f = 1 } f && $1 == "bytes" { print $4; exit }')
	m1=$(bin/ffcvfs info "$rbeton" | awk '/^image field/ { f = 1 } f && $1 == "bytes" { print $4; exit }')
	printf '  restart markers: mean image %.0f bytes, %+.2f %% over the source JPEGs (%.0f bytes)\n' "$m1" "$(echo "100 * ($m1 - $m0) / $m0" | bc -l)" "$m0"
	local ffcv
	ffcv=$(ffcv_src)
	if [[ -n $ffcv ]]; then
		r=$(for ((i = 0; i < RUNS; i++)); do steady_rate /usr/bin/python3 scripts/ffcv_loader_bench.py "$beton" --ffcv "$ffcv" --workers 2 --batch-size 256 --resolution 160 --epochs 3; done | median)
		printf '%-52s %10.0f %-9s %8.3f\n' "FFCV 1.0 Loader, same crop, epochs 2-3 (JIT done)" "$r" "images/s" "$(echo "$r / $base" | bc -l)"
		local same
		same=$(/usr/bin/python3 scripts/ffcv_same_pixels.py "$beton" "$rbeton" --ffcv "$ffcv") ||
			die "FFCV decodes the --restart-interval beton to other pixels: $same"
		echo "  FFCV 1.0 over the --restart-interval beton and the source one: $same"
		bench_feed_ffcv_written "$dir" "$folder" "$ffcv" "$base"
	fi
	r=$(rate_of /usr/bin/python3 scripts/torch_loader_bench.py "$folder" --workers 2 --batch-size 256 --resolution 160)
	printf '%-52s %10.0f %-9s %8.3f\n' "torchvision ImageFolder + DataLoader" "$r" "images/s" "$(echo "$r / $base" | bc -l)"
	local -a peaks
	mapfile -t peaks < <(epoch_peaks_mib 5 bin/ffcvfeed bench --data "$beton" "${pipe[@]}")
	printf '%-52s %10.1f %-9s %8s\n' "ffcvfeed bench peak RSS after epoch 1 (baseline)" "${peaks[0]}" "MiB" "1.00"
	for e in 2 5; do
		printf '%-52s %10.1f %-9s %8.3f\n' "ffcvfeed bench peak RSS after epoch $e" "${peaks[e - 1]}" "MiB" "$(echo "${peaks[e - 1]} / ${peaks[0]}" | bc -l)"
	done
	[[ ${DECODED:-1} == 0 ]] || bench_feed_decoded "$dir" "$rbeton" "$folder"
}

# restart_beton DIR FOLDER: prints the path of DIR/bench-restart4.beton, the
# photos of FOLDER written with restart markers every ~4 MCUs (ffcvfs write
# --restart-interval 4), written first when missing or older than
# DIR/bench.beton.
restart_beton() {
	local rbeton=$1/bench-restart4.beton
	if [[ ! -f $rbeton || $rbeton -ot $1/bench.beton ]]; then
		bin/ffcvfs write --restart-interval 4 "$2" "$rbeton.tmp" >&2 && mv "$rbeton.tmp" "$rbeton" || die "ffcvfs write --restart-interval failed"
	fi
	echo "$rbeton"
}

# bench_decoded [N]: bench_feed_decoded alone, on N bench photos (5000).
bench_decoded() {
	local n=${1:-5000}
	[[ $n =~ ^[0-9]+$ ]] || die "N must be a whole number, got '$n'"
	local dir=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}/feed-$n
	scripts/make-bench-data.sh "$n" "$dir" >&2 || die "make-bench-data.sh failed"
	go build -o bin/ffcvfeed ./cmd/ffcvfeed || die "go build ./cmd/ffcvfeed failed"
	local rbeton
	rbeton=$(restart_beton "$dir" "$dir/imagefolder")
	bin/ffcvfeed decode-bench --data "$rbeton" --workers 2 >/dev/null || die "ffcvfeed decode-bench failed" # warm the page cache
	echo "ffcvfeed: $n real-photo JPEGs (shorter side 300-500 px), 2 workers, $(nproc) cores ($(cpu_model)), median of $RUNS runs"
	bench_feed_decoded "$dir" "$rbeton" "$dir/imagefolder"
}

# bench_feed_ffcv_written DIR FOLDER FFCV BASE: the betons people have. FOLDER
# written by FFCV's own DatasetWriter (jpg mode, quality 90: every image
# encoded again by OpenCV, no restart markers), and that beton converted
# by ffcvfs write --from-beton; alternating, RUNS times: FFCV's Loader on
# the FFCV-written beton, ffcvfeed bench on it and on the converted one.
# The ratio that counts: the converted one's images/s over FFCV's Loader on
# the original, median of each run's. BASE: the decode baseline above.
bench_feed_ffcv_written() {
	local dir=$1 folder=$2 ffcv=$3 base=$4 i f p q
	local fbeton cbeton=$dir/bench-ffcv-converted.beton
	local pipe=(--resolution 160 --crop random-resized --flip 0.5 --dtype uint8 --workers 2 --batch-size 256)
	fbeton=$(ffcv_written "$dir" "$folder" "$ffcv")
	if [[ ! -f $cbeton || $cbeton -ot $fbeton ]]; then
		bin/ffcvfs write --from-beton "$fbeton" "$cbeton" >&2 || die "ffcvfs write --from-beton failed"
	fi
	local -a fs ps qs rf rq
	for ((i = 0; i < RUNS; i++)); do
		f=$(steady_rate /usr/bin/python3 scripts/ffcv_loader_bench.py "$fbeton" --ffcv "$ffcv" --workers 2 --batch-size 256 --resolution 160 --epochs 3)
		p=$(steady_rate bin/ffcvfeed bench --data "$fbeton" "${pipe[@]}" --epochs 3)
		q=$(steady_rate bin/ffcvfeed bench --data "$cbeton" "${pipe[@]}" --epochs 3)
		[[ -n $f && -n $p && -n $q ]] || die "no images/s figure from FFCV's Loader or ffcvfeed bench"
		fs+=("$f") ps+=("$p") qs+=("$q") rf+=("$(echo "$p / $f" | bc -l)") rq+=("$(echo "$q / $f" | bc -l)")
	done
	echo "a beton FFCV's DatasetWriter wrote (jpg, quality 90), and it converted by ffcvfs write --from-beton;"
	echo "ratio: to FFCV's Loader on the FFCV-written beton, median of each run's"
	f=$(printf '%s\n' "${fs[@]}" | median)
	printf '%-52s %10.0f %-9s %8s\n' "FFCV-written beton: FFCV 1.0 Loader (baseline)" "$f" "images/s" "1.00"
	printf '%-52s %10.0f %-9s %8.3f\n' "FFCV-written beton: ffcvfeed bench" "$(printf '%s\n' "${ps[@]}" | median)" "images/s" "$(printf '%s\n' "${rf[@]}" | median)"
	printf '%-52s %10.0f %-9s %8.3f\n' "FFCV-written beton, converted: ffcvfeed bench" "$(printf '%s\n' "${qs[@]}" | median)" "images/s" "$(printf '%s\n' "${rq[@]}" | median)"
	echo "  per run, FFCV's Loader / ffcvfeed / ffcvfeed converted images/s: $(for ((i = 0; i < RUNS; i++)); do printf '%.0f/%.0f/%.0f ' "${fs[i]}" "${ps[i]}" "${qs[i]}"; done)"
	echo "  the converted beton's ffcvfeed over the decode baseline above: $(echo "$(printf '%s\n' "${qs[@]}" | median) / $base" | bc -l | xargs printf '%.3f')"
}

# ffcv_written DIR FOLDER FFCV: prints the path of DIR/bench-ffcv.beton, the
# photos of FOLDER as FFCV's own DatasetWriter writes them (jpg, quality 90:
# every image encoded again by OpenCV, no restart markers), written first
# when missing or older than DIR/bench.beton.
ffcv_written() {
	local dir=$1 folder=$2 ffcv=$3 fbeton=$1/bench-ffcv.beton
	if [[ ! -f $fbeton || $fbeton -ot $dir/bench.beton ]]; then
		rm -f "$fbeton.tmp"
		/usr/bin/python3 scripts/ffcv_write_imagefolder.py --ffcv "$ffcv" --workers 2 "$folder" "$fbeton.tmp" >&2 &&
			mv "$fbeton.tmp" "$fbeton" || die "FFCV's DatasetWriter failed"
	fi
	echo "$fbeton"
}

# bench_feed_decoded DIR BETON FOLDER: the decoded-image cache
# (--decoded-cache-size) on BETON, the photos of FOLDER with restart markers.
# Alternating, RUNS times: the full decode (the baseline, before and after
# the run's other rows, their mean); ffcvfeed bench without the cache
# (epochs 2-3 of 3); with a cache the size of every image's planes and with
# one of half that, 4 epochs each: epoch 1 (which fills the cache) and
# epochs 2-4; and FFCV's Loader on a beton FFCV's writer made of FOLDER
# (epochs 2-3 of 3), when FFCV builds here. Ratios: medians of each run's.
bench_feed_decoded() {
	local dir=$1 beton=$2 folder=$3 i out b b2 p e1 all h1 half f held fbeton= ffcv
	local pipe=(--resolution 160 --crop random-resized --flip 0.5 --dtype uint8 --workers 2 --batch-size 256)
	local -a bs ps e1s alls h1s halfs fs r_all_b r_all_e1 r_half_e1 r_all_p r_all_f r_p_b r_e1_b r_e1_p
	ffcv=$(ffcv_src)
	[[ -z $ffcv ]] || fbeton=$(ffcv_written "$dir" "$folder" "$ffcv")
	out=$(bin/ffcvfeed bench --data "$beton" "${pipe[@]}" --epochs 1 --decoded-cache-size 1TiB) || die "ffcvfeed bench --decoded-cache-size failed"
	held=$(sed -n 's|.*holds [0-9]* images, .* (\([0-9]*\) bytes) in RAM.*|\1|p' <<<"$out" | tail -n 1)
	[[ -n $held && $held -gt 0 ]] || die "no bytes held in the output of ffcvfeed bench --decoded-cache-size:"$'\n'"$out"
	# epoch_rates CMD...: epoch 1's images/s, then the median of the later epochs'.
	epoch_rates() {
		local o
		o=$("$@") || die "$* failed"
		sed -n 's|^epoch 0:.* \([0-9.][0-9.]*\) images/s.*|\1|p' <<<"$o"
		sed -n 's|^epoch \([0-9]*\):.* \([0-9.][0-9.]*\) images/s.*|\1 \2|p' <<<"$o" | awk '$1 > 0 {print $2}' | median
	}
	for ((i = 0; i < RUNS; i++)); do
		b=$(decode_rate "$beton")
		p=$(steady_rate bin/ffcvfeed bench --data "$beton" "${pipe[@]}" --epochs 3)
		{ read -r e1; read -r all; } < <(epoch_rates bin/ffcvfeed bench --data "$beton" "${pipe[@]}" --epochs 4 --decoded-cache-size "$held")
		{ read -r h1; read -r half; } < <(epoch_rates bin/ffcvfeed bench --data "$beton" "${pipe[@]}" --epochs 4 --decoded-cache-size "$((held / 2))")
		f=
		[[ -z $fbeton ]] || f=$(steady_rate /usr/bin/python3 scripts/ffcv_loader_bench.py "$fbeton" --ffcv "$ffcv" --workers 2 --batch-size 256 --resolution 160 --epochs 3)
		b2=$(decode_rate "$beton")
		[[ -n $b && -n $b2 && -n $p && -n $e1 && -n $all && -n $h1 && -n $half ]] || die "no images/s figure from ffcvfeed decode-bench or bench"
		b=$(echo "($b + $b2) / 2" | bc -l)
		bs+=("$b") ps+=("$p") e1s+=("$e1") alls+=("$all") h1s+=("$h1") halfs+=("$half")
		r_p_b+=("$(echo "$p / $b" | bc -l)") r_e1_b+=("$(echo "$e1 / $b" | bc -l)") r_e1_p+=("$(echo "$e1 / $p" | bc -l)")
		r_all_b+=("$(echo "$all / $b" | bc -l)") r_all_e1+=("$(echo "$all / $e1" | bc -l)") r_all_p+=("$(echo "$all / $p" | bc -l)")
		r_half_e1+=("$(echo "$half / $h1" | bc -l)")
		if [[ -n $f ]]; then
			fs+=("$f") r_all_f+=("$(echo "$all / $f" | bc -l)")
		fi
	done
	med() { printf '%s\n' "$@" | median; }
	echo
	echo "the decoded-image cache (--decoded-cache-size): $(bin/ffcvfs info "$beton" | awk '$1 == "samples" {print $2; exit}') photos with restart markers, the pipeline as above;"
	echo "every image's planes: $held bytes ($(echo "$held / 1048576" | bc) MiB); ratios: medians of each run's"
	printf '%-52s %10.0f %-9s %8s\n' "ffcvfeed decode-bench --workers 2 (baseline)" "$(med "${bs[@]}")" "images/s" "1.00"
	printf '%-52s %10.0f %-9s %8.3f\n' "ffcvfeed bench, no cache, epochs 2-3" "$(med "${ps[@]}")" "images/s" "$(med "${r_p_b[@]}")"
	printf '%-52s %10.0f %-9s %8.3f\n' "cache holding every image: epoch 1 (fills it)" "$(med "${e1s[@]}")" "images/s" "$(med "${r_e1_b[@]}")"
	printf '%-52s %10.0f %-9s %8.3f\n' "cache holding every image: epochs 2-4" "$(med "${alls[@]}")" "images/s" "$(med "${r_all_b[@]}")"
	printf '%-52s %10s %-9s %8.3f\n' "  epochs 2-4 over epoch 1" "" "" "$(med "${r_all_e1[@]}")"
	printf '%-52s %10s %-9s %8.3f\n' "  epochs 2-4 over no cache" "" "" "$(med "${r_all_p[@]}")"
	printf '%-52s %10s %-9s %8.3f\n' "  epoch 1 over no cache" "" "" "$(med "${r_e1_p[@]}")"
	printf '%-52s %10.0f %-9s %8s\n' "cache of half the bytes: epoch 1" "$(med "${h1s[@]}")" "images/s" ""
	printf '%-52s %10.0f %-9s %8.3f\n' "cache of half the bytes: epochs 2-4 (over its epoch 1)" "$(med "${halfs[@]}")" "images/s" "$(med "${r_half_e1[@]}")"
	if ((${#fs[@]} > 0)); then
		printf '%-52s %10.0f %-9s %8s\n' "FFCV 1.0 Loader, FFCV-written beton, epochs 2-3" "$(med "${fs[@]}")" "images/s" ""
		printf '%-52s %10s %-9s %8.3f\n' "  the cache's epochs 2-4 over FFCV's Loader" "" "" "$(med "${r_all_f[@]}")"
	else
		echo "FFCV's Loader: not built here (FFCV=0, or it did not build)"
	fi
	echo "  per run, decode / no cache / epoch 1 / epochs 2-4 / half: epoch 1, 2-4 / FFCV images/s:"
	for ((i = 0; i < RUNS; i++)); do
		printf '    %.0f / %.0f / %.0f / %.0f / %.0f, %.0f / %s\n' "${bs[i]}" "${ps[i]}" "${e1s[i]}" "${alls[i]}" "${h1s[i]}" "${halfs[i]}" "${fs[i]:-}"
	done
}

# What bench_legacy started, for legacy_cleanup.
LEGACY_PIDS=()
LEGACY_MNTS=()
LEGACY_SCRAPERS=()
LEGACY_TMP=

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

legacy_cleanup() {
	local pid mnt
	for pid in "${LEGACY_SCRAPERS[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	LEGACY_SCRAPERS=()
	for pid in "${LEGACY_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	for mnt in "${LEGACY_MNTS[@]}"; do
		if grep -qs " $mnt " /proc/mounts; then
			fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
		fi
	done
	LEGACY_PIDS=() LEGACY_MNTS=()
	[[ -z $LEGACY_TMP ]] || rm -rf "$LEGACY_TMP"
	LEGACY_TMP=
}

# page_cache_mib DIR: MiB of DIR's files in the kernel's page cache.
page_cache_mib() {
	find "$1" -type f -print0 | xargs -0 fincore --bytes --noheadings --output RES |
		awk '{s += $1} END {printf "%.1f\n", s / 1048576}'
}

# bench_cifar N: FFCV's CIFAR-10 training pipeline (raw 32x32 images whole,
# flip, translate by 2 filling with the mean, cutout 4) by FFCV's Loader and
# by ffcvfeed on one beton of N images cut from the feed bench's photos,
# beside the limit: the same bytes copied and mirrored by a plain loop
# (tools/rawcopy). All three take turns, RUNS times.
# bench_writer [N]: FFCV's DatasetWriter and ffcvfs.DatasetWriter on the
# same data and workers, alternating (scripts/writer_bench.py): N CIFAR-like
# arrays, and the 5,000 photos of make-bench-data.sh as JPEG bytes and as
# PIL images, the latter beside merely iterating the dataset.
bench_writer() {
	local n=${1:-50000}
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1000)) || die "N must be a whole number, at least 1000, got '$n'"
	local base=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}
	local photos=$base/feed-5000 out
	ensure_apt python3-pil
	scripts/make-bench-data.sh 5000 "$photos" >&2 || die "make-bench-data.sh failed"
	go build -o bin/ffcvfs ./cmd/ffcvfs || die "go build ./cmd/ffcvfs failed"
	local ffcv
	ffcv=$(ffcv_src)
	[[ -n $ffcv ]] || die "FFCV did not build here: the writer bench needs it as its baseline"
	out=$(mktemp -d)
	FFCVFS="$PWD/bin/ffcvfs" /usr/bin/python3 scripts/writer_bench.py --ffcv "$ffcv" --runs "$RUNS" --cifar "$n" \
		"$photos/imagefolder" "$out" || die "writer_bench.py failed"
	rm -rf "$out"
}

bench_cifar() {
	local n=${1:-50000}
	[[ $n =~ ^[0-9]+$ ]] && ((n >= 1000)) || die "N must be a whole number, at least 1000, got '$n'"
	local base=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}
	local photos=$base/feed-5000 dir=$base/cifar-$n
	ensure_apt python3-pil
	scripts/make-bench-data.sh 5000 "$photos" >&2 || die "make-bench-data.sh failed"
	go build -o bin/ffcvfeed ./cmd/ffcvfeed || die "go build ./cmd/ffcvfeed failed"
	go build -o bin/ffcvfs ./cmd/ffcvfs || die "go build ./cmd/ffcvfs failed"
	go build -o bin/rawcopy ./tools/rawcopy || die "go build ./tools/rawcopy failed"
	local beton=$dir/cifar.beton
	if [[ ! -f $beton ]]; then
		rm -rf "$dir"
		log "making $n 32x32 images from the photos of $photos"
		/usr/bin/python3 scripts/make_cifar_data.py "$photos/imagefolder" "$dir/imagefolder" "$n" >&2 || die "make_cifar_data.py failed"
		bin/ffcvfs write --mode raw "$dir/imagefolder" "$dir/tmp.beton" >&2 || die "ffcvfs write failed"
		mv "$dir/tmp.beton" "$beton"
	fi
	local epochs=8 mean=125,122,113
	local feed=(--crop none --flip 0.5 --translate 2 --translate-fill "$mean" --cutout 4 --cutout-fill "$mean"
		--batch-size 512 --workers 2 --order random --drop-last --epochs "$epochs")
	local ffcv i l f c
	local -a ls fs cs rf rc rfc
	ffcv=$(ffcv_src)
	echo
	echo "CIFAR-10 pipeline: $n raw 32x32 images cut from real photos, batches of 512 in random order, 2 workers,"
	echo "$(nproc) cores, median of $RUNS runs taking turns; each figure the median images/s of epochs 2-$epochs."
	echo "ffcvfeed: --crop none --flip 0.5 --translate 2 --cutout 4 (fill $mean, the example's int(CIFAR_MEAN)), uint8 NHWC."
	echo "FFCV 1.0: SimpleRGBImageDecoder, RandomHorizontalFlip, RandomTranslate(2), Cutout(4), ToTensor, ToTorchImage"
	echo "(examples/cifar/train_cifar.py up to the GPU), os_cache. limit: tools/rawcopy, the bytes copied, half mirrored."
	for ((i = 0; i < RUNS; i++)); do
		l=$(steady_rate bin/rawcopy -data "$beton" -workers 2 -batch-size 512 -epochs "$epochs")
		f=$(steady_rate bin/ffcvfeed bench --data "$beton" "${feed[@]}")
		ls+=("$l") fs+=("$f") rf+=("$(echo "$f / $l" | bc -l)")
		if [[ -n $ffcv ]]; then
			c=$(steady_rate /usr/bin/python3 scripts/ffcv_loader_bench.py "$beton" --ffcv "$ffcv" --pipeline cifar --workers 2 --batch-size 512 --epochs "$epochs")
			cs+=("$c") rc+=("$(echo "$c / $l" | bc -l)") rfc+=("$(echo "$f / $c" | bc -l)")
		fi
	done
	printf '%-44s %10s %-9s %8s\n' "what" "value" "unit" "ratio"
	printf '%-44s %10.0f %-9s %8s\n' "limit: copy + mirror loop (baseline)" "$(printf '%s\n' "${ls[@]}" | median)" "images/s" "1.00"
	printf '%-44s %10.0f %-9s %8.3f\n' "ffcvfeed bench" "$(printf '%s\n' "${fs[@]}" | median)" "images/s" "$(printf '%s\n' "${rf[@]}" | median)"
	if [[ -n $ffcv ]]; then
		printf '%-44s %10.0f %-9s %8.3f\n' "FFCV 1.0 Loader" "$(printf '%s\n' "${cs[@]}" | median)" "images/s" "$(printf '%s\n' "${rc[@]}" | median)"
		printf '%-44s %10.2f %-9s\n' "ffcvfeed / FFCV, median of per-run ratios" "$(printf '%s\n' "${rfc[@]}" | median)" "x"
	fi
	echo "  per run, limit / ffcvfeed / FFCV images/s: $(for ((i = 0; i < RUNS; i++)); do printf '%.0f/%.0f/%.0f ' "${ls[i]}" "${fs[i]}" "${cs[i]:-0}"; done)"
}

# bench_legacy N [WAY...]: the legacy loader over the plain folder and over
# mounts made each WAY, "NAME|FLAGS" (default: default flags, --kernel-cache,
# OPEN answered with direct I/O, and the no-isatty rows); FLAGS starting
# bin=PATH mount with that build of ffcvfs. A FLAGS of
# --metrics-addr gets a free loopback port and a scraper that fetches
# /metrics every second.
bench_legacy() {
	local n=${1:-5000}
	[[ $n =~ ^[0-9]+$ ]] || die "N must be a whole number, got '$n'"
	shift || true
	local -a ways=("default flags|" "--kernel-cache|--kernel-cache" "direct I/O, OPEN answered|--fuse-compat=opens")
	local -a extra=(--no-isatty)
	(($# == 0)) || ways=("$@") extra=()
	local dir=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}/feed-$n
	ensure_apt python3-torchvision python3-pil fuse3 util-linux curl
	scripts/make-bench-data.sh "$n" "$dir" >&2 || die "make-bench-data.sh failed"
	local tmp name args pid mnt prog
	tmp=$(mktemp -d)
	LEGACY_TMP=$tmp
	trap legacy_cleanup EXIT
	trap 'exit 130' INT TERM
	local -a specs=()
	local port
	for name in "${ways[@]}"; do
		args=${name#*|}
		# FLAGS starting bin=PATH: that build of ffcvfs (an older one, to
		# compare builds epoch by epoch in one run).
		prog=bin/ffcvfs
		if [[ $args == bin=* ]]; then
			prog=${args%% *} args=${args#"${args%% *}"}
			prog=${prog#bin=} args=${args# }
			[[ -x $prog ]] || die "$prog: no such program"
		fi
		port=
		if [[ $args == --metrics-addr ]]; then
			port=$(free_port)
			args="--metrics-addr=127.0.0.1:$port"
		fi
		mnt=$tmp/mnt${#LEGACY_MNTS[@]}
		mkdir -p "$mnt"
		# shellcheck disable=SC2086
		"$prog" mount $args "$dir/bench.beton" "$mnt" 2>>"$tmp/mount.log" &
		pid=$!
		LEGACY_PIDS+=("$pid") LEGACY_MNTS+=("$mnt")
		for _ in $(seq 100); do [[ -e $mnt/.ffcvfs/stats.json ]] && break; sleep 0.1; done
		[[ -e $mnt/.ffcvfs/stats.json ]] || die "ffcvfs mount $args failed: $(tail -n 5 "$tmp/mount.log")"
		if [[ -n $port ]]; then
			# A scraper at 1 s, 15 times Prometheus's default rate.
			while curl -fsS -o /dev/null "http://127.0.0.1:$port/metrics"; do sleep 1; done &
			LEGACY_SCRAPERS+=("$!")
		fi
		specs+=("--mount=${name%%|*}=$mnt:$pid")
	done
	echo
	echo "legacy loader: torchvision ImageFolder + RandomResizedCrop(224) + flip + PILToTensor,"
	echo "DataLoader(num_workers=2, batch_size=64); $n real-photo JPEGs, warm, $(nproc) cores;"
	echo "epochs alternate between the roots in one process; medians of $RUNS rounds after one of warm-up."
	echo "cpu: the mount's CPU time per 1,000 files read; req/file: FUSE requests per file, by opcode."
	((${#extra[@]} == 0)) || echo "no isatty: files opened with buffering=4096 (no isatty()); the mount's ratio is to the plain folder read so."
	local out
	out=$(/usr/bin/python3 scripts/legacy_bench.py --plain "$dir/imagefolder" "${specs[@]}" --rounds "$RUNS" \
		--workers 2 --batch-size 64 --resolution 224 "${extra[@]}" | tee "$tmp/epochs.txt") || die "legacy_bench.py failed"
	[[ -z ${VERBOSE:-} ]] || cat "$tmp/epochs.txt"
	printf '%-44s %9s %7s %9s %8s  %s\n' "what" "images/s" "ratio" "cpu ms/1k" "req/file" "by opcode"
	sed -n 's/^median //p' <<<"$out" | awk '{
		what = $0; sub(/: [0-9.]+ images\/s.*/, "", what)
		match($0, /: [0-9.]+ images\/s/); rate = substr($0, RSTART + 2, RLENGTH - 11)
		ratio = $0; sub(/.* ratio /, "", ratio); sub(/ .*/, "", ratio)
		cpu = "-"; req = "-"; ops = ""
		if ($0 ~ /cpu_us_per_file/) {
			cpu = $0; sub(/.*cpu_us_per_file /, "", cpu); sub(/ .*/, "", cpu); cpu = sprintf("%.1f", cpu)
			req = $0; sub(/.*req_per_file /, "", req); ops = req; sub(/ .*/, "", req); sub(/^[^ ]* /, "", ops)
		}
		printf "%-44s %9.0f %7s %9s %8s  %s\n", what, rate, ratio, cpu, req, ops
	}'
	echo
	echo "memory after the last round: the kernel's page cache of each root's files (fincore), the mounts' RSS"
	printf '%-44s %12s %12s %12s\n' "root" "page cache" "RSS" "peak RSS"
	printf '%-44s %9s MiB %12s %12s\n' "plain folder" "$(page_cache_mib "$dir/imagefolder")" "-" "-"
	local i=0 rss hwm
	for name in "${ways[@]}"; do
		name=${name%%|*} pid=${LEGACY_PIDS[i]} mnt=${LEGACY_MNTS[i]}
		rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
		hwm=$(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
		printf '%-44s %9s MiB %8s MiB %8s MiB\n' "mount, $name" "$(page_cache_mib "$mnt")" "$rss" "$hwm"
		((i += 1))
	done
	legacy_cleanup
	trap - EXIT INT TERM
}

# What bench_storage started, for storage_cleanup.
STORAGE_TMP=
STORAGE_PIDS=()
STORAGE_MOUNT_PID=
STORAGE_RSS=0

# storage_cleanup: unmount, stop the servers, remove the temp folder.
storage_cleanup() {
	local pid
	if [[ -n $STORAGE_MOUNT_PID ]]; then
		kill -TERM "$STORAGE_MOUNT_PID" 2>/dev/null || true
		wait "$STORAGE_MOUNT_PID" 2>/dev/null || true
		STORAGE_MOUNT_PID=
	fi
	if [[ -n $STORAGE_TMP ]] && grep -qs " $STORAGE_TMP/mnt " /proc/mounts; then
		fusermount3 -u -z "$STORAGE_TMP/mnt" 2>/dev/null || umount -l "$STORAGE_TMP/mnt" 2>/dev/null || true
	fi
	for pid in "${STORAGE_PIDS[@]}"; do
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	STORAGE_PIDS=()
	[[ -z $STORAGE_TMP ]] || rm -rf "$STORAGE_TMP"
	STORAGE_TMP=
}

# wait_port PORT NAME PID: wait until 127.0.0.1:PORT accepts connections,
# failing when process PID (whose log is $STORAGE_TMP/NAME.log) exits.
wait_port() {
	local i
	for ((i = 0; i < 200; i++)); do
		(: >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		kill -0 "$3" 2>/dev/null || die "$2 exited at start: $(tail -n 5 "$STORAGE_TMP/$2.log")"
		sleep 0.1
	done
	die "$2 does not answer on 127.0.0.1:$1 after 20 s: $(tail -n 5 "$STORAGE_TMP/$2.log")"
}

# storage_mount CACHE: mount s3://bench/$STORAGE_KEY, through the capped
# link, at $STORAGE_TMP/mnt with a cache of CACHE; sets STORAGE_MOUNT_PID.
storage_mount() { mount_at "s3://bench/$STORAGE_KEY" "$1"; }

# mount_at SRC CACHE ARGS...: mount SRC (S3 through the capped link, or a
# file) at $STORAGE_TMP/mnt with a cache of CACHE and more flags ARGS;
# sets STORAGE_MOUNT_PID.
mount_at() {
	local src=$1 cache=$2
	shift 2
	GOMAXPROCS=${MOUNT_GOMAXPROCS:-} bin/ffcvfs mount --s3-endpoint "http://127.0.0.1:$STORAGE_LINK" --s3-path-style --cache-size "$cache" \
		--readers "$STORAGE_READERS" --order-batch-size "$STORAGE_BATCH" "$@" \
		"$src" "$STORAGE_TMP/mnt" 2>>"$STORAGE_TMP/mount.log" &
	STORAGE_MOUNT_PID=$!
	local i
	for ((i = 0; i < 300; i++)); do
		[[ -e $STORAGE_TMP/mnt/.ffcvfs/stats.json ]] && return 0
		kill -0 "$STORAGE_MOUNT_PID" 2>/dev/null || die "ffcvfs mount exited: $(tail -n 5 "$STORAGE_TMP/mount.log")"
		sleep 0.1
	done
	die "ffcvfs mount $src is not ready after 30 s: $(tail -n 5 "$STORAGE_TMP/mount.log")"
}

# bytes_read MNT: the bytes the mount at MNT has read from storage: with
# a peer tier, what it read for the tier; else what its cache read.
bytes_read() {
	/usr/bin/python3 -c 'import json, sys; s = json.load(open(sys.argv[1])); p = s.get("peers"); print(p["storage_bytes"] if p else s["cache"]["bytes_read"])' "$1/.ffcvfs/stats.json"
}

# cpu_ms PID: the CPU time (user and system) process PID has used, in ms.
cpu_ms() {
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); print int(($12 + $13) * 1000 / hz) }' "/proc/$1/stat" 2>/dev/null || echo 0
}

# storage_cpu: the CPU ms used so far by versitygw, toxiproxy and the link.
storage_cpu() {
	local pid
	for pid in "${STORAGE_PIDS[@]}"; do
		printf '%s ' "$(cpu_ms "$pid")"
	done
}

# storage_umount: unmount, after setting STORAGE_RSS to the mount's peak
# resident size in KiB (VmHWM) and STORAGE_MOUNT_CPU to its CPU ms.
storage_umount() {
	STORAGE_MOUNT_CPU=$(cpu_ms "$STORAGE_MOUNT_PID")
	STORAGE_RSS=$(sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$STORAGE_MOUNT_PID/status")
	kill -TERM "$STORAGE_MOUNT_PID"
	wait "$STORAGE_MOUNT_PID" || die "ffcvfs mount failed: $(tail -n 5 "$STORAGE_TMP/mount.log")"
	STORAGE_MOUNT_PID=
}

# storage_run K CMD...: run CMD (storagebench get, or storagebench mount
# without its MNT, then run against a fresh mount) once and append its
# result line to $STORAGE_TMP/way-K.txt.
storage_run() {
	local k=$1 out c0 c1 n0 n1
	shift
	STORAGE_RSS=0 STORAGE_MOUNT_CPU=0
	# The link logs a line per connection it accepts.
	n0=$(grep -c '^connection ' "$STORAGE_TMP/link.log" || true)
	if [[ $2 == mount ]]; then
		storage_mount "$STORAGE_CACHE"
		read -ra c0 <<<"$(storage_cpu)"
		out=$("$@" "$STORAGE_TMP/mnt") || die "$* failed"
		read -ra c1 <<<"$(storage_cpu)"
		storage_umount
	else
		read -ra c0 <<<"$(storage_cpu)"
		out=$("$@") || die "$* failed"
		read -ra c1 <<<"$(storage_cpu)"
	fi
	n1=$(grep -c '^connection ' "$STORAGE_TMP/link.log" || true)
	echo "$out rss=$STORAGE_RSS cpu_s3=$((c1[0] - c0[0])) cpu_proxy=$((c1[1] - c0[1])) cpu_link=$((c1[2] - c0[2])) cpu_mount=$STORAGE_MOUNT_CPU conns=$((n1 - n0))" >>"$STORAGE_TMP/way-$k.txt"
}

# storage_row WHAT K: print the row of way K's medians (images/s, MB/s of
# images, share of the cap, MB/s on the link, bytes fetched per byte of
# images read, requests per image, the mount's peak RSS, images read), and
# its CPU row to $STORAGE_TMP/cpu.txt; the result lines go to
# $STORAGE_TMP/results.txt too.
storage_row() {
	local what=$1 k=$2
	[[ -s $STORAGE_TMP/way-$k.txt ]] || return 0
	cat "$STORAGE_TMP/way-$k.txt" >>"$STORAGE_TMP/results.txt"
	awk -v what="$what" -v cap="$STORAGE_BW" '
		function median(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
		{
			for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
			img = img " " v["images"] / v["seconds"]; mb = mb " " v["bytes"] / 1e6 / v["seconds"]
			link = link " " v["fetched"] / 1e6 / v["seconds"]; amp = amp " " v["fetched"] / v["bytes"]
			req = req " " v["requests"] / v["images"]
			rss = rss " " v["rss"] / 1024; n = n " " v["images"]
			k = 1000 / v["images"]
			c_s3 = c_s3 " " v["cpu_s3"] * k; c_px = c_px " " v["cpu_proxy"] * k; c_ln = c_ln " " v["cpu_link"] * k
			c_mt = c_mt " " v["cpu_mount"] * k; c_rd = c_rd " " v["cpu_reader"] * k
			# The CPU per GET of whoever sends them: the mount, or the
			# reader where there is none.
			get = get " " (v["cpu_mount"] > 0 ? v["cpu_mount"] : v["cpu_reader"]) * 1000 / v["requests"]
			conns = conns " " v["conns"]
			c_all = c_all " " (v["cpu_s3"] + v["cpu_proxy"] + v["cpu_link"] + v["cpu_mount"] + v["cpu_reader"]) / 10 / v["seconds"]
		}
		END {
			m = median(mb); r = median(rss)
			printf "%-40s %7.0f %7.1f %6.1f%% %7.1f %8.3f %7.3f %7s %6.0f\n", what, median(img), m, 100 * m / cap, median(link), median(amp), median(req), (r > 0 ? sprintf("%.0f", r) : "-"), median(n)
			# The first row is the baseline: its reader sends the GETs.
			own = (median(c_mt) > 0 ? median(c_mt) : median(c_rd))
			if (base == "") { base = own; print base >basefile }
			printf "%-40s %7.0f %7.0f %7.0f %7.0f %7.0f %7.0f%% %6.0f %7.0f %6.2f\n", what, median(c_s3), median(c_px), median(c_ln), median(c_mt), median(c_rd), median(c_all), median(conns), median(get), own / base >>cpufile
			printf "%-40s", what >>runsfile; k = split(img, a, " "); for (i = 1; i <= k; i++) printf " %7.0f", a[i] >>runsfile; printf "\n" >>runsfile
		}' cpufile="$STORAGE_TMP/cpu.txt" runsfile="$STORAGE_TMP/runs.txt" basefile="$STORAGE_TMP/base-cpu.txt" \
		base="$(cat "$STORAGE_TMP/base-cpu.txt" 2>/dev/null)" "$STORAGE_TMP/way-$k.txt"
}

# start_versitygw PORT: versitygw on 127.0.0.1:PORT serving $STORAGE_TMP/s3,
# with fresh credentials exported for the clients and nothing of the
# user's AWS settings.
start_versitygw() {
	local var
	for var in $(compgen -e); do
		[[ $var != AWS_* ]] || unset "$var"
	done
	AWS_ACCESS_KEY_ID=BENCH$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
	AWS_SECRET_ACCESS_KEY=$(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')
	export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_REGION=us-east-1 AWS_EC2_METADATA_DISABLED=true \
		AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
	# Keep-alive, as S3 does: without it versitygw answers every request
	# with "Connection: close", and each GET would pay for new TCP
	# connections (to the link, the proxy and the server). A 64 KiB read
	# buffer: by default versitygw allocates 1 MiB for every ranged GET
	# (not for a GET of a whole object), which on these shared cores costs
	# more CPU than the request itself; S3 answers ranges as fast as objects.
	ROOT_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID ROOT_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \
		versitygw --port "127.0.0.1:$1" --keep-alive --region us-east-1 --quiet \
		posix --io-buffer-size $((64 << 10)) "$STORAGE_TMP/s3" >"$STORAGE_TMP/versitygw.log" 2>&1 &
	STORAGE_PIDS+=($!)
	wait_port "$1" versitygw "$!"
}

# storage_setup N: the S3 set-up of bench_storage and bench_disk: the bench
# data of N images, versitygw behind toxiproxy and the capped link, the
# beton and the images uploaded. Sets STORAGE_* and the variables below.
storage_setup() {
	n=${1:-5000}
	[[ $n =~ ^[0-9]+$ ]] || die "N must be a whole number, got '$n'"
	dir=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}/feed-$n
	latency=${LATENCY_MS:-10} secs=${MAX_SECONDS:-30}
	STORAGE_BW=${BANDWIDTH_MBS:-100}
	STORAGE_BATCH=${BATCH:-64}
	# Requests in flight: the mount's default. Its default cap on bytes in
	# flight (4 pages) keeps pages to 4 at once, which cover this link's
	# bandwidth-delay product (100 MB/s × 10 ms is half a page) without
	# splitting the link among pages needed later; ranges of one image
	# need dozens in flight to fill it.
	STORAGE_READERS=${READERS:-64}
	[[ $latency =~ ^[0-9]+$ ]] || die "LATENCY_MS must be a whole number of milliseconds, got '$latency'"
	[[ $STORAGE_BW =~ ^[1-9][0-9]*$ ]] || die "BANDWIDTH_MBS must be a positive whole number, got '$STORAGE_BW'"
	[[ $STORAGE_BATCH =~ ^[1-9][0-9]*$ ]] || die "BATCH must be a positive whole number, got '$STORAGE_BATCH'"
	[[ $STORAGE_READERS =~ ^[1-9][0-9]*$ ]] || die "READERS must be a positive whole number, got '$STORAGE_READERS'"
	[[ $secs =~ ^[1-9][0-9]*$ ]] || die "MAX_SECONDS must be a positive whole number, got '$secs'"
	ensure_apt fuse3 libjpeg62-turbo-dev pkg-config gcc
	ensure_versitygw
	ensure_toxiproxy
	scripts/make-bench-data.sh "$n" "$dir" >&2 || die "make-bench-data.sh failed"
	mkdir -p bin
	local cmd
	for cmd in ffcvfs ffcvfeed; do
		go build -o "bin/$cmd" "./cmd/$cmd" || die "go build ./cmd/$cmd failed"
	done
	go build -o bin/storagebench ./tools/storagebench || die "go build ./tools/storagebench failed"
	# 2 MiB pages, the smallest: 10 % of a small beton still holds several
	# (of the 8 MiB pages of bench.beton, it would hold one).
	beton=$dir/bench-2MiB.beton page=$((2 << 20))
	if [[ ! -s $beton || $dir/bench.beton -nt $beton ]]; then
		bin/ffcvfs write --page-size 2MiB "$dir/imagefolder" "$beton" >&2 || die "ffcvfs write failed"
	fi
	size=$(stat -c %s "$beton")
	STORAGE_KEY=bench-2MiB.beton
	# The readers' cache: 10 % of the beton, rounded up to whole pages (the
	# cache rounds its budget down). 4 DataLoader workers with batches of 64
	# read from about 5 pages at once (2 open in the quasi-random window, and
	# 4 batches span about 3), and the link's bandwidth-delay product needs
	# 1 or 2 more in flight: below about 7 pages the cache is too small for
	# the order, whatever its share of the beton (CACHE overrides).
	STORAGE_CACHE=${CACHE:-$((((size / 10 + page - 1) / page * page) >> 20))MiB}
	# ffcvfeed's own cache reads up to 16 pages at once through the mount,
	# each a series of FUSE reads: the mount's cache holds them all.
	feed_cache=${FEED_CACHE:-$(((size / 10 > 32 * page ? size / 10 : 32 * page) >> 20))MiB}

	STORAGE_TMP=$(mktemp -d)
	trap storage_cleanup EXIT
	trap 'exit 130' INT TERM
	mkdir -p "$STORAGE_TMP/s3" "$STORAGE_TMP/mnt"
	local ports vgw api proxy
	mapfile -t ports < <(bin/storagebench ports 4)
	((${#ports[@]} == 4)) || die "storagebench ports found no free ports"
	vgw=${ports[0]} api=${ports[1]} proxy=${ports[2]} STORAGE_LINK=${ports[3]}
	start_versitygw "$vgw"
	toxiproxy-server -host 127.0.0.1 -port "$api" >"$STORAGE_TMP/toxiproxy.log" 2>&1 &
	STORAGE_PIDS+=($!)
	wait_port "$api" toxiproxy "$!"
	local tp=(toxiproxy-cli -h "http://127.0.0.1:$api")
	{
		"${tp[@]}" create -l "127.0.0.1:$proxy" -u "127.0.0.1:$vgw" s3 &&
			"${tp[@]}" toxic add -t latency -a "latency=$latency" -n latency s3 &&
			"${tp[@]}" toxic add -t bandwidth -a "rate=$((STORAGE_BW * 1000))" -n bandwidth s3
	} >/dev/null || die "setting up toxiproxy failed"
	# toxiproxy's bandwidth toxic (KB/s) caps each connection on its own;
	# the link caps all of them together.
	bin/storagebench link -listen "127.0.0.1:$STORAGE_LINK" -to "127.0.0.1:$proxy" -rate "$STORAGE_BW" >"$STORAGE_TMP/link.log" 2>&1 &
	STORAGE_PIDS+=($!)
	wait_port "$STORAGE_LINK" link "$!"
	bin/storagebench put -endpoint "http://127.0.0.1:$vgw" -bucket bench -beton "$beton" -key "$STORAGE_KEY" \
		-folder "$dir/imagefolder" -prefix images || die "uploading to versitygw failed"

}

# fetch_share PROFILE: the shares of a mount's CPU profile spent fetching
# from storage (each request with its retries: the storage package,
# net/http, crypto and the network's system calls below it) and serving
# FUSE (its requests, from reading /dev/fuse to writing the reply), as
# fetch=F fuse=U, fractions of 1.
fetch_share() {
	go tool pprof -top -cum "bin/ffcvfs" "$1" 2>/dev/null | awk '
		$NF ~ /storage\.\(\*retryPolicy\)\.run$/ { f = $5 }
		$NF ~ /fs\/transport\.\(\*Server\)\.loop$/ { u = $5 }
		END { printf "fetch=%.4f fuse=%.4f", f / 100, u / 100 }'
}

# bench_link [GIB]: the mount reading a beton of GIB GiB (default 1) of the
# fixture's real photos at the link's speed: from versitygw and from nginx
# (ranges with sendfile) on loopback, nothing shaped. Per source and order
# (QuasiRandomSampler's, RandomSampler's), one epoch's reads by 4 readers:
# GB/s fetched and the mount's CPU per GB, beside a reference reader
# (storagebench replay) fetching the very ranges the mount fetched (nginx's
# log of the mount's HTTP run of that order) over as many connections:
# plain GETs, through one presigned URL for S3.
bench_link() {
	local gib=${1:-1} secs=${MAX_SECONDS:-60}
	[[ $gib =~ ^[1-9][0-9]*$ ]] || die "GIB must be a positive whole number, got '$gib'"
	ensure_apt fuse3 libjpeg62-turbo-dev pkg-config gcc nginx
	ensure_go
	ensure_versitygw
	mkdir -p bin
	local cmd
	for cmd in ffcvfs ffcvfeed; do
		go build -o "bin/$cmd" "./cmd/$cmd" || die "go build ./cmd/$cmd failed"
	done
	go build -o bin/storagebench ./tools/storagebench || die "go build ./tools/storagebench failed"
	STORAGE_TMP=$(mktemp -d)
	trap storage_cleanup EXIT
	trap 'exit 130' INT TERM
	STORAGE_BATCH=${BATCH:-64} STORAGE_READERS=${READERS:-64}
	local cache=${CACHE:-256MiB}
	mkdir -p "$STORAGE_TMP/s3" "$STORAGE_TMP/mnt" "$STORAGE_TMP/www" "$STORAGE_TMP/tree"
	# The photos, as many times over as GIB GiB takes: links, then a beton.
	local photos=testdata/imagefolder-small per copies c cls f
	per=$(du -sbL "$photos" | cut -f1)
	copies=$(((gib * (1 << 30) + per - 1) / per))
	for ((c = 0; c < copies; c++)); do
		for cls in "$photos"/*/; do
			mkdir -p "$STORAGE_TMP/tree/$(basename "$cls")"
			for f in "$cls"*; do
				ln -s "$(realpath "$f")" "$STORAGE_TMP/tree/$(basename "$cls")/$c-$(basename "$f")"
			done
		done
	done
	local beton=$STORAGE_TMP/www/link.beton
	bin/ffcvfs write "$STORAGE_TMP/tree" "$beton" >&2 || die "ffcvfs write failed"
	# nginx's workers run as another user: the way to the beton is theirs to read.
	chmod 755 "$STORAGE_TMP" "$STORAGE_TMP/www"
	local size
	size=$(stat -c %s "$beton")
	local ports vgw ngx
	mapfile -t ports < <(bin/storagebench ports 2)
	vgw=${ports[0]} ngx=${ports[1]} STORAGE_LINK=${ports[0]}
	start_versitygw "$vgw"
	bin/storagebench put -endpoint "http://127.0.0.1:$vgw" -bucket bench -beton "$beton" -key link.beton ||
		die "uploading to versitygw failed"
	# nginx: ranges with sendfile, connections kept, every request logged
	# with its connection and range.
	cat >"$STORAGE_TMP/nginx.conf" <<-CONF
		pid $STORAGE_TMP/nginx.pid;
		error_log $STORAGE_TMP/nginx-error.log;
		worker_processes auto;
		events { worker_connections 1024; }
		http {
		    access_log off;
		    log_format ranges '\$connection \$http_range \$status \$body_bytes_sent';
		    client_body_temp_path $STORAGE_TMP/nginx-tmp;
		    sendfile on; tcp_nopush on;
		    keepalive_requests 1000000; keepalive_timeout 300s;
		    server {
		        listen 127.0.0.1:$ngx;
		        root $STORAGE_TMP/www;
		        access_log $STORAGE_TMP/access.log ranges;
		    }
		}
	CONF
	nginx -c "$STORAGE_TMP/nginx.conf" -g 'daemon off;' >"$STORAGE_TMP/nginx.log" 2>&1 &
	STORAGE_PIDS+=($!)
	wait_port "$ngx" nginx "$!"

	echo
	echo "the mount at the link's speed: a $((size >> 20)) MiB beton of the fixture's photos ($copies times over), from versitygw and"
	echo "from nginx on loopback, nothing shaped; $(nproc) cores, median of $RUNS runs taking turns. One epoch, 4 readers"
	echo "dealt batches of $STORAGE_BATCH, --cache-size $cache --readers $STORAGE_READERS; a run stops after $secs s. GB/s: 10^9 bytes fetched"
	echo "from storage a second; CPU/GB: the mount's CPU seconds per GB fetched. The reference: the same ranges,"
	echo "those nginx logged for the mount's HTTP run of that order, fetched by storagebench replay over as many"
	echo "connections (plain GETs; S3 through one presigned URL)."
	echo "fetch: the share of the mount's CPU in fetching (its CPU profile: requests with their retries), and"
	echo "fuse: in serving FUSE requests; ratio: the mount's CPU per GB in fetching over the reference's."
	printf '%-30s %6s %7s %6s %6s %9s %8s %9s %6s %6s\n' "what" "GB/s" "CPU/GB" "fetch" "fuse" "fetch/GB" "ref GB/s" "ref CPU/GB" "ratio" "conns"
	local orders=(quasi-random random-announced) names=("QuasiRandomSampler" "RandomSampler") i o src out m r
	for ((i = 0; i < RUNS; i++)); do
		for o in 0 1; do
			for src in http s3; do
				: >"$STORAGE_TMP/access.log"
				# The mount's CPU profile, for where its CPU goes.
				export FFCVFS_CPUPROFILE=$STORAGE_TMP/cpu-$src-$o-$i.pb
				if [[ $src == http ]]; then
					mount_at "http://127.0.0.1:$ngx/link.beton" "$cache"
				else
					mount_at "s3://bench/link.beton" "$cache"
				fi
				unset FFCVFS_CPUPROFILE
				out=$(bin/storagebench mount -order "${orders[o]}" -j 4 -batch "$STORAGE_BATCH" -max-seconds "$secs" "$STORAGE_TMP/mnt") ||
					die "storagebench mount failed"
				storage_umount
				m="$out cpu_mount=$STORAGE_MOUNT_CPU $(fetch_share "$STORAGE_TMP/cpu-$src-$o-$i.pb")"
				[[ -z ${BENCH_PROFILES:-} ]] || cp "$STORAGE_TMP/cpu-$src-$o-$i.pb" "$BENCH_PROFILES/"
				if [[ $src == http ]]; then
					cp "$STORAGE_TMP/access.log" "$STORAGE_TMP/ranges-$o.log"
					r=$(bin/storagebench replay -log "$STORAGE_TMP/ranges-$o.log" -url "http://127.0.0.1:$ngx/link.beton") ||
						die "storagebench replay failed"
				else
					r=$(bin/storagebench replay -log "$STORAGE_TMP/ranges-$o.log" -endpoint "http://127.0.0.1:$vgw" -bucket bench -key link.beton) ||
						die "storagebench replay failed"
				fi
				echo "$m $(sed 's/\([a-z_]*\)=/ref_\1=/g' <<<"$r")" >>"$STORAGE_TMP/link-$src-$o.txt"
			done
		done
	done
	for o in 0 1; do
		for src in http s3; do
			awk -v what="$([[ $src == http ]] && echo nginx || echo versitygw), ${names[o]}" '
				function median(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
				{
					for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
					gb = gb " " v["fetched"] / 1e9 / v["seconds"]; cpu = cpu " " v["cpu_mount"] / v["fetched"] * 1e6
					rgb = rgb " " v["ref_bytes"] / 1e9 / v["ref_seconds"]; rcpu = rcpu " " v["ref_cpu_reader"] / v["ref_bytes"] * 1e6
					fe = fe " " v["fetch"]; fu = fu " " v["fuse"]; fgb = fgb " " v["cpu_mount"] * v["fetch"] / v["fetched"] * 1e6
					ratio = ratio " " (v["cpu_mount"] * v["fetch"] / v["fetched"]) / (v["ref_cpu_reader"] / v["ref_bytes"]); conns = conns " " v["ref_conns"]
				}
				END { printf "%-30s %6.2f %7.2f %5.0f%% %5.0f%% %9.2f %8.2f %9.2f %6.2f %6.0f\n", what, median(gb), median(cpu), 100 * median(fe), 100 * median(fu), median(fgb), median(rgb), median(rcpu), median(ratio), median(conns) }
			' "$STORAGE_TMP/link-$src-$o.txt"
		done
	done
}

bench_storage() {
	local n dir latency secs beton page size feed_cache
	storage_setup "$@"
	echo
	echo "training from S3: $n real-photo JPEGs, a $((size >> 20)) MiB beton of 2 MiB pages, on versitygw on loopback behind"
	echo "toxiproxy (+$latency ms per response) and a $STORAGE_BW MB/s link shared by all connections; $(nproc) cores, median of"
	echo "$RUNS runs, the ways taking turns. One epoch of every image, bytes only, 4 readers dealt batches as"
	echo "DataLoader's workers are, for the bucket as for the mount. Mounts: fresh for every run, --cache-size $STORAGE_CACHE"
	echo "--readers $STORAGE_READERS --order-batch-size $STORAGE_BATCH; batches of $STORAGE_BATCH. versitygw keeps connections alive, as S3 does."
	echo "A run stops after $secs s; its figures are then over the images it read (last column). MB/s: 10^6 bytes"
	echo "of images per second; link: MB/s fetched from S3; fetch/rd: bytes fetched per byte of images read;"
	echo "GET/img: requests to S3 per image read (S3 bills each); RSS: the mount's peak."
	printf '%-40s %7s %7s %7s %7s %8s %7s %7s %6s\n' "what" "img/s" "MB/s" "of cap" "link" "fetch/rd" "GET/img" "RSS MiB" "images"
	# The ways take turns, run by run, so that the machine's noise falls on
	# all of them alike.
	local r=(-j 4 -batch "$STORAGE_BATCH" -max-seconds "$secs")
	local ways=(
		"GET per image object, random (baseline)"
		"mount, QuasiRandomSampler order"
		"mount, random order, not announced"
		"mount, RandomSampler order (announced)"
	)
	local cmds=(
		"bin/storagebench get -endpoint http://127.0.0.1:$STORAGE_LINK -bucket bench -prefix images"
		"bin/storagebench mount -order quasi-random"
		"bin/storagebench mount -order random"
		"bin/storagebench mount -order random-announced"
	)
	local i k
	for ((i = 0; i < RUNS; i++)); do
		for k in "${!ways[@]}"; do
			[[ -z ${WAYS:-} || ${ways[k]} =~ $WAYS ]] || continue
			# shellcheck disable=SC2086 # the commands are words without spaces
			storage_run "$k" ${cmds[k]} "${r[@]}"
		done
	done
	for k in "${!ways[@]}"; do
		storage_row "${ways[k]}" "$k"
	done
	echo
	echo "CPU per 1,000 images, ms (user + system, from /proc/PID/stat), by process, and all of them together"
	echo "as a share of one core ($(nproc) cores): where the time of an epoch goes on this machine; conns: TCP"
	echo "connections the reader or the mount opened to S3 in the run; µs/GET: CPU µs of whoever sends the GETs"
	echo "(the mount, else the reader) per GET; ÷base: its CPU per image over the baseline reader's (first row)."
	printf '%-40s %7s %7s %7s %7s %7s %8s %6s %7s %6s\n' "what" "S3" "proxy" "link" "mount" "reader" "of core" "conns" "µs/GET" "÷base"
	cat "$STORAGE_TMP/cpu.txt" 2>/dev/null || true
	echo
	echo "Images/s of each run, in the order they ran (the ways take turns):"
	cat "$STORAGE_TMP/runs.txt" 2>/dev/null || true
	if [[ ${FEED:-1} == 0 ]]; then
		storage_cleanup
		return 0
	fi

	local pipe=(--resolution 160 --crop random-resized --flip 0.5 --dtype uint8 --workers 2 --batch-size 256)
	echo
	echo "ffcvfeed bench (random-resized crop to 160, flip 0.5, uint8 batches of 256, 2 workers), one epoch, median"
	echo "of $RUNS runs: on the local beton, and through a fresh S3 mount as above with cache $feed_cache."
	echo "fetch/data: bytes the mount fetched per byte of images in the dataset; link use: the share of the"
	echo "epoch the link needed for them; RSS: the mount's peak. On few cores, the mount, the proxy and the S3"
	echo "server take CPU time from the decoders."
	printf '%-40s %7s %8s %10s %8s %7s\n' "what" "img/s" "ratio" "fetch/data" "link use" "RSS MiB"
	# Local and mount runs take turns, so that the machine's noise falls on
	# both alike.
	local i out r b f data_bytes data_images bases=() rates=() fetched=() rss=()
	bin/ffcvfeed bench --data "$beton" "${pipe[@]}" >/dev/null || die "ffcvfeed bench failed" # warm the page cache
	# The images the mount serves: those of the folder the beton was made of.
	read -r data_images data_bytes < <(find "$dir/imagefolder" -type f -printf '%s\n' | awk '{ n++; b += $1 } END { print n, b }')
	for ((i = 0; i < RUNS; i++)); do
		out=$(bin/ffcvfeed bench --data "$beton" "${pipe[@]}") || die "ffcvfeed bench failed"
		bases+=("$(images_per_s <<<"$out")")
		storage_mount "$feed_cache"
		out=$(bin/ffcvfeed bench --data "$STORAGE_TMP/mnt" "${pipe[@]}") || die "ffcvfeed bench through the mount failed"
		rates+=("$(images_per_s <<<"$out")")
		fetched+=("$(bytes_read "$STORAGE_TMP/mnt")")
		storage_umount
		rss+=("$STORAGE_RSS")
	done
	b=$(printf '%s\n' "${bases[@]}" | median)
	r=$(printf '%s\n' "${rates[@]}" | median)
	f=$(printf '%s\n' "${fetched[@]}" | median)
	printf '%-40s %7.0f %8s %10s %8s %7s\n' "ffcvfeed bench, local beton (baseline)" "$b" "1.00" "-" "-" "-"
	printf '%-40s %7.0f %8.3f %10.3f %7.1f%% %7.0f\n' "ffcvfeed bench through the S3 mount" "$r" "$(echo "$r / $b" | bc -l)" \
		"$(echo "$f / $data_bytes" | bc -l)" "$(echo "100 * $f / 1000000 / $STORAGE_BW / ($data_images / $r)" | bc -l)" \
		"$(echo "$(printf '%s\n' "${rss[@]}" | median) / 1024" | bc -l)"
	storage_cleanup
	trap - EXIT INT TERM
}

bench_disk() {
	local n dir latency secs beton page size feed_cache
	storage_setup "$@"
	local disk=$STORAGE_TMP/disk order i k out
	local r=(-j 4 -batch "$STORAGE_BATCH" -max-seconds "${MAX_SECONDS:-120}")
	echo
	echo "the disk tier: $n real-photo JPEGs, a $((size >> 20)) MiB beton of 2 MiB pages, on versitygw behind toxiproxy"
	echo "(+$latency ms per response) and a $STORAGE_BW MB/s link; --cache-size $STORAGE_CACHE (10 %), --disk-cache of"
	echo "$((size >> 20)) MiB on $(df --output=source "$STORAGE_TMP" | tail -n 1); 4 readers, batches of $STORAGE_BATCH, bytes only; median of $RUNS runs, taking turns."
	echo "fetch/rd: bytes fetched from S3 per byte of images read; ratio: to the local file's epochs 2 and 3;"
	echo "tier waits: reads that waited for a page the disk tier served (stats.json tier_this_epoch)."
	echo "\"disk tier not in RAM\": a fresh mount after the tier's files were dropped from the page cache"
	echo "(posix_fadvise DONTNEED), as when RAM is smaller than the disk cache.${BUSY:+ With $BUSY busy loops beside it.}"
	printf '%-60s %7s %8s %7s %6s\n' "what" "img/s" "fetch/rd" "ratio" "waits"
	for ((i = 0; i < ${BUSY:-0}; i++)); do
		sh -c 'while :; do :; done' &
		STORAGE_PIDS+=($!) # storage_cleanup ends them
	done
	# epoch WAY ORDER: one epoch through the mount, its line with the
	# tier's waits of that epoch.
	epoch() {
		local out waits
		out=$(bin/storagebench mount -order "$2" "${r[@]}" "$STORAGE_TMP/mnt") || die "storagebench failed"
		waits=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["cache"]["tier_this_epoch"]["waits"])' "$STORAGE_TMP/mnt/.ffcvfs/stats.json")
		echo "way=$1 $out tierwaits=$waits" >>"$STORAGE_TMP/disk-$2.txt"
	}
	for order in ${ORDER:-random quasi-random}; do
		: >"$STORAGE_TMP/disk-$order.txt"
		for ((i = 0; i < RUNS; i++)); do
			mount_at "$beton" "$STORAGE_CACHE"
			for k in 1 2 3; do
				epoch "local$k" "$order"
			done
			storage_umount
			rm -rf "$disk"
			mount_at "s3://bench/$STORAGE_KEY" "$STORAGE_CACHE" --disk-cache "$disk" --disk-cache-size "$size"
			for k in 1 2 3; do
				epoch "s3$k" "$order"
			done
			storage_umount
			mount_at "s3://bench/$STORAGE_KEY" "$STORAGE_CACHE" --disk-cache "$disk" --disk-cache-size "$size"
			epoch fresh "$order"
			storage_umount
			/usr/bin/python3 -c '
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(root, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)' "$disk" || die "could not drop the disk tier from the page cache"
			mount_at "s3://bench/$STORAGE_KEY" "$STORAGE_CACHE" --disk-cache "$disk" --disk-cache-size "$size"
			epoch cold "$order"
			storage_umount
		done
		awk -v order="$order" '
			function median(s,   a, k, i, j, t) { k = split(s, a, " "); for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }; return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
			{
				for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
				img[v["way"]] = img[v["way"]] " " v["images"] / v["seconds"]
				amp[v["way"]] = amp[v["way"]] " " v["fetched"] / v["bytes"]
				tw[v["way"]] = tw[v["way"]] " " v["tierwaits"]
			}
			END {
				base = (median(img["local2"]) + median(img["local3"])) / 2
				split("local1 local2 local3 s31 s32 s33 fresh cold", ways, " ")
				name["local1"] = "local file, epoch 1"; name["local2"] = "local file, epoch 2"; name["local3"] = "local file, epoch 3"
				name["s31"] = "S3 + disk cache, epoch 1"; name["s32"] = "S3 + disk cache, epoch 2"; name["s33"] = "S3 + disk cache, epoch 3"
				name["fresh"] = "S3 + disk cache, fresh mount, epoch 1"
				name["cold"] = "S3 + disk cache, fresh mount, tier not in RAM"
				for (i = 1; i <= 8; i++) {
					w = ways[i]
					printf "%-60s %7.0f %8.4f %7.2f %6s\n", order ": " name[w], median(img[w]), (w ~ /^local/ ? 0 : median(amp[w])), median(img[w]) / base, (w ~ /^local/ ? "-" : median(tw[w]))
				}
			}' "$STORAGE_TMP/disk-$order.txt"
		cat "$STORAGE_TMP/disk-$order.txt" >>"$STORAGE_TMP/results.txt"
	done
	echo
	echo "Disk tier after the last run: $(bin/ffcvfs cache ls "$disk" | tail -n 1)"
	storage_cleanup
	trap - EXIT INT TERM
}

# scan_seconds ROOT: seconds ImageFolder(ROOT) takes to build its sample list.
scan_seconds() {
	/usr/bin/python3 -W ignore -c '
import sys, time
from torchvision.datasets import ImageFolder
t = time.perf_counter()
ds = ImageFolder(sys.argv[1])
print(f"{time.perf_counter() - t:.3f} {len(ds)}")' "$1"
}

bench_scan() {
	local n=${1:-1281167}
	[[ $n =~ ^[0-9]+$ ]] || die "N must be a whole number, got '$n'"
	ensure_apt python3-torchvision fuse3
	local dir=${BENCH_DIR:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/bench}/scan-$n
	mkdir -p "$dir"
	if [[ ! -e $dir/scan.beton ]]; then
		echo "writing $dir/scan.beton ($n samples)" >&2
		go run ./tools/mkscanbeton -n "$n" -classes 1000 -out "$dir/scan.beton" || die "mkscanbeton failed"
	fi
	local tmp mnt pid
	tmp=$(mktemp -d)
	LEGACY_TMP=$tmp
	trap legacy_cleanup EXIT
	trap 'exit 130' INT TERM
	# mount_scan: mounts the beton at a fresh mountpoint; sets mnt and pid.
	mount_scan() {
		mnt=$tmp/mnt${#LEGACY_MNTS[@]}
		mkdir -p "$mnt"
		bin/ffcvfs mount "$dir/scan.beton" "$mnt" 2>>"$tmp/mount.log" &
		pid=$!
		LEGACY_PIDS+=("$pid") LEGACY_MNTS+=("$mnt")
		for _ in $(seq 300); do [[ -e $mnt/.ffcvfs/stats.json ]] && break; sleep 0.1; done
		[[ -e $mnt/.ffcvfs/stats.json ]] || die "ffcvfs mount failed: $(tail -n 5 "$tmp/mount.log")"
	}
	if [[ ! -e $dir/plain.done ]]; then
		echo "making $dir/plain: the mount's names as empty files" >&2
		mount_scan
		rm -rf "$dir/plain"
		/usr/bin/python3 -c '
import os, sys
src, dst = sys.argv[1], sys.argv[2]
for c in sorted(e.name for e in os.scandir(src) if e.is_dir() and not e.name.startswith(".")):
    os.makedirs(os.path.join(dst, c))
    for e in os.scandir(os.path.join(src, c)):
        os.close(os.open(os.path.join(dst, c, e.name), os.O_CREAT | os.O_WRONLY, 0o644))' "$mnt" "$dir/plain" ||
			die "making the plain tree failed"
		touch "$dir/plain.done"
	fi
	local -a plain=() first=() warm=() rss=()
	local r
	scan_seconds "$dir/plain" >/dev/null # warm the plain tree's dentries
	for r in $(seq "$RUNS"); do
		plain+=("$(scan_seconds "$dir/plain" | cut -d' ' -f1)")
		mount_scan
		first+=("$(scan_seconds "$mnt" | cut -d' ' -f1)")
		plain+=("$(scan_seconds "$dir/plain" | cut -d' ' -f1)")
		warm+=("$(scan_seconds "$mnt" | cut -d' ' -f1)")
		rss+=("$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status")")
		echo "round $r: plain ${plain[-2]} s, ${plain[-1]} s; mount first ${first[-1]} s, warm ${warm[-1]} s" >&2
	done
	local p
	p=$(printf '%s\n' "${plain[@]}" | median)
	echo
	echo "ImageFolder start-up scan: $n samples in 1,000 classes, $(nproc) cores, medians of $RUNS rounds"
	printf '%-40s %9s %7s\n' "root" "seconds" "ratio"
	printf '%-40s %9.2f %7.2f\n' "plain folder, empty files (warm)" "$p" 1
	printf '%-40s %9.2f %7.2f\n' "mount, first scan after mounting" "$(printf '%s\n' "${first[@]}" | median)" \
		"$(echo "$(printf '%s\n' "${first[@]}" | median) / $p" | bc -l)"
	printf '%-40s %9.2f %7.2f\n' "mount, second scan" "$(printf '%s\n' "${warm[@]}" | median)" \
		"$(echo "$(printf '%s\n' "${warm[@]}" | median) / $p" | bc -l)"
	echo "mount RSS after two scans: $(echo "$(printf '%s\n' "${rss[@]}" | median) / 1024" | bc) MiB;" \
		"FUSE requests of the last mount: $(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["fuse"]["requests"])' "$mnt/.ffcvfs/stats.json")"
	legacy_cleanup
	trap - EXIT INT TERM
}

bench_cluster() {
	local n dir latency secs beton page size feed_cache
	storage_setup "$@"
	local ranks=2 nodes kind e k r share cache diskcap owned pids line total rates t0 t1 images
	local secret="$STORAGE_TMP/peer-secret"
	(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$secret")
	echo
	echo "a cluster on one machine: N mounts of S3 stand for N nodes of $ranks ranks; $n real-photo JPEGs, a"
	echo "$((size >> 20)) MiB beton of 2 MiB pages, on versitygw behind toxiproxy (+$latency ms) and a $STORAGE_BW MB/s link. Orders:"
	echo "global and node-affine: each mount's RAM cache and --disk-cache hold a little more than 1/N of the beton;"
	echo "global + peers: no disk cache, the peer tier (--peer-listen 127.77.R.K in run R, --peer-cache-size 1.15/N of the"
	echo "beton and 2 pages) instead; global + peers + disk: the peer tier keeping the pages a node owns in its"
	echo "--disk-cache of 1.15/N of the beton and 2 pages (--peer-cache-size 0, the default with a disk cache), a RAM"
	echo "cache of $((2 * ranks + 4)) pages."
	echo "Ranks read their quasi-random orders (storagebench, 2 readers, batches of"
	echo "$STORAGE_BATCH). Share of the beton fetched from S3 by all nodes, per epoch, and the images/s of all ranks:"
	local hogs=()
	if ((${BUSY:-0} > 0)); then
		echo "BUSY=$BUSY: that many busy loops keep cores busy throughout, as other work on a training machine does."
		for ((k = 0; k < BUSY; k++)); do
			bash -c 'while :; do :; done' &
			hogs+=($!)
		done
		trap 'kill "${hogs[@]}" 2>/dev/null; storage_cleanup' EXIT INT TERM
	fi
	echo "mem/node: the most any node held in RAM, MiB: its cache's budget and, over the peer tier, peers.cache_bytes."
	local runs=${CLUSTER_RUNS:-1} run
	[[ $runs =~ ^[1-9][0-9]*$ ]] || die "CLUSTER_RUNS must be a positive whole number, got '$runs'"
	((runs == 1)) || echo "CLUSTER_RUNS=$runs: each figure that many times, a row each (run)."
	printf '%-6s %-22s %4s %9s %9s %9s %9s %9s %9s %9s\n' "nodes" "order" "run" "epoch 1" "epoch 2" "epoch 3" "img/s 1" "img/s 2" "img/s 3" "mem/node"
	for nodes in ${NODES:-3 8}; do
		# A node's share, 15 % more, and the pages its ranks read at once.
		share=$(((size / nodes + page - 1) / page))
		cache=$(((share * 115 / 100 + 2 * ranks + 2) * (page >> 20)))MiB
		diskcap=$(((share * 115 / 100 + 2) * page))
		# What the peer tier keeps a node's share in: 15 % more and 2
		# pages (docs/operating.md's sizing; owners are placed with bounded loads, no
		# node over ⌈1.1·P/N⌉ pages).
		owned=$(((share * 115 + 99) / 100 + 2))
		for kind in ${KINDS:-global node-affine global+peers global+peers+disk}; do
		for ((run = 1; run <= runs; run++)); do
			local mpids=() mnts=() peers=()
			for ((k = 0; k < nodes; k++)); do peers+=("http://127.77.$run.$((k + 1)):17490"); done
			for ((k = 0; k < nodes; k++)); do
				mkdir -p "$STORAGE_TMP/node$k"
				rm -rf "$STORAGE_TMP/disk$k"
				local tier=(--disk-cache "$STORAGE_TMP/disk$k" --disk-cache-size "$diskcap")
				local ram=$cache peering=(--peer-listen "127.77.$run.$((k + 1)):17490" --peers "$(IFS=,; echo "${peers[*]}")" --peer-secret-file "$secret")
				case $kind in
				global+peers)
					tier=("${peering[@]}" --peer-cache-size "$((owned * (page >> 20)))MiB")
					;;
				global+peers+disk)
					tier=("${peering[@]}" --disk-cache "$STORAGE_TMP/disk$k" --disk-cache-size "$((owned * page))")
					ram=$(((2 * ranks + 4) * (page >> 20)))MiB
					;;
				esac
				# CLUSTER_PROFILE=DIR: each mount's CPU profile there.
				FFCVFS_CPUPROFILE=${CLUSTER_PROFILE:+$CLUSTER_PROFILE/$nodes-$kind-$run-node$k.prof} \
					bin/ffcvfs ${CLUSTER_DEBUG:+-v} mount --background --s3-endpoint "http://127.0.0.1:$STORAGE_LINK" --cache-size "$ram" \
					--readers "$STORAGE_READERS" --order-batch-size "$STORAGE_BATCH" "${tier[@]}" \
					"s3://bench/$STORAGE_KEY" "$STORAGE_TMP/node$k" 2>>"$STORAGE_TMP/mount.log" ||
					die "ffcvfs mount failed: $(tail -n 5 "$STORAGE_TMP/mount.log")"
				mnts+=("$STORAGE_TMP/node$k")
			done
			line=$(printf '%-6s %-22s %4s' "$nodes" "$kind" "$run")
			rates=""
			for e in 0 1 2; do
				local before=() after=()
				for k in "${!mnts[@]}"; do before+=("$(bytes_read "${mnts[k]}")"); done
				pids=()
				: >"$STORAGE_TMP/epoch.txt"
				t0=$(date +%s.%N)
				for ((k = 0; k < nodes; k++)); do
					for ((r = 0; r < ranks; r++)); do
						local shard=$((k * ranks + r))-of-$((nodes * ranks))
						[[ $kind == node-affine ]] && shard+=.nodes-$nodes
						bin/storagebench mount -order quasi-random -j 2 -batch "$STORAGE_BATCH" -seed 1 -epoch "$e" \
							-shard "$shard" "${mnts[k]}" >>"$STORAGE_TMP/epoch.txt" &
						pids+=($!)
					done
				done
				for r in "${pids[@]}"; do wait "$r" || die "storagebench failed"; done
				t1=$(date +%s.%N)
				cat "$STORAGE_TMP/epoch.txt" >>"$STORAGE_TMP/cluster.txt"
				images=$(sed -n 's/^images=\([0-9]*\) .*/\1/p' "$STORAGE_TMP/epoch.txt" | awk '{ n += $1 } END { print n + 0 }')
				rates+=$(printf ' %9.0f' "$(echo "$images / ($t1 - $t0)" | bc -l)")
				total=0
				for k in "${!mnts[@]}"; do
					after+=("$(bytes_read "${mnts[k]}")")
					total=$((total + after[k] - before[k]))
				done
				line+=$(printf ' %8.1f%%' "$(echo "100 * $total / $size" | bc -l)")
			done
			# The most RAM any node held; with CLUSTER_DEBUG, each node's
			# share, storage reasons and tiers on stderr.
			local mem
			mem=$(CLUSTER_DEBUG=${CLUSTER_DEBUG:-} /usr/bin/python3 -c '
import json, os, sys
most = 0
for m in sys.argv[1:]:
    s = json.load(open(m + "/.ffcvfs/stats.json"))
    p = s.get("peers") or {}
    most = max(most, s["cache"]["budget_bytes"] + p.get("cache_bytes", 0))
    if os.environ["CLUSTER_DEBUG"]:
        t = [(x["kind"], x["entries"], x["stored"], x["refused"], x["evictions"], x["skipped"], x["hits"]) for x in ((s["cache"].get("tiers") or {}).get("tiers") or [])]
        print(m, "owned", p.get("pages_owned"), "reasons", p.get("storage_reasons"), "held", p.get("held_reads"), "tiers", t, file=sys.stderr)
print(most >> 20)' "${mnts[@]}")
			echo "$line$rates $(printf '%9s' "$mem")"
			if [[ -n ${CLUSTER_DEBUG:-} ]]; then
				grep -h "a peer failed" "$STORAGE_TMP/mount.log" | head -n 20 >&2 || true
				: >"$STORAGE_TMP/mount.log"
			fi
			for m in "${mnts[@]}"; do bin/ffcvfs umount "$m" || die "ffcvfs umount $m failed"; done
		done
		done
	done
	if ((${#hogs[@]})); then kill "${hogs[@]}" 2>/dev/null || true; fi
	storage_cleanup
	trap - EXIT INT TERM
}

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
