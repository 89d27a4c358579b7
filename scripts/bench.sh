#!/usr/bin/env bash
# End-to-end benchmarks, each printed next to its baseline measured in the
# same run, as medians of several runs (the machine is noisy: compare ratios).
#
#   scripts/bench.sh write [N]    ffcvfs write throughput (images/s) on N images
#                                 (default 2000) built from the shared fixture
#                                 photos, vs reading the same files
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
#                                 256, 2 workers) vs decoding alone, and vs torchvision
#                                 ImageFolder + DataLoader (2 workers) doing the same;
#                                 then ffcvfeed's peak RSS after epochs 1, 2 and 5
#
# Environment: RUNS (default 3) runs per figure; BENCH_DIR (default a temp dir;
# for feed, ${FFCVFS_CACHE:-~/.cache/ffcvfs}/bench, so the data is kept).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"

RUNS=${RUNS:-3}

# median: the median of the numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

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

# photo_folder N DIR: an ImageFolder of N real photos, the shared fixture
# photos copied round-robin into their classes.
photo_folder() {
	local n=$1 dir=$2 src i=0 f cls
	src="$(shared_dir)/fixtures/imagefolder-small"
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
	bin/ffcvfs write --classes-out "$dir/classes.txt" "$dir/folder" "$dir/data.beton" >/dev/null
	mkdir -p "$mnt"
	READALL="$dir/readall"
	go build -o "$READALL" ./scripts/readall
	echo "reading every file: $n real-photo JPEGs, warm, median of $RUNS runs, $(nproc) cores"
	printf '%-52s %10s %10s %8s\n' "what" "files/s" "MB/s" "ratio"
	local mode args base1 base4 r
	"$READALL" "$dir/folder" >/dev/null # warm the kernel page cache
	base1=$(readall_rate 1 "$dir/folder")
	base4=$(readall_rate 4 "$dir/folder")
	printf '%-52s %s %8s\n' "plain folder, 1 reader (baseline)" "$base1" "1.00"
	printf '%-52s %s %8s\n' "plain folder, 4 readers (baseline)" "$base4" "1.00"
	for mode in "mount (page cache only)|" "mount --kernel-cache|--kernel-cache"; do
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
	echo "ffcvfeed: $n real-photo JPEGs (shorter side 300-500 px), 2 workers, $(nproc) cores, median of $RUNS runs"
	echo "decode: full libjpeg-turbo decode of every image. pipeline and torchvision: random-resized crop to"
	echo "160x160, flip 0.5, uint8 batches of 256, one epoch (torchvision's time includes starting its workers)."
	echo "peak RSS: the process's peak resident size after each epoch of one 5-epoch ffcvfeed bench run."
	printf '%-52s %10s %-9s %8s\n' "what" "value" "unit" "ratio"
	local base r
	bin/ffcvfeed decode-bench --data "$beton" --workers 2 >/dev/null || die "ffcvfeed decode-bench failed" # warm the page cache
	base=$(rate_of bin/ffcvfeed decode-bench --data "$beton" --workers 2)
	printf '%-52s %10.0f %-9s %8s\n' "ffcvfeed decode-bench --workers 2 (baseline)" "$base" "images/s" "1.00"
	r=$(rate_of bin/ffcvfeed bench --data "$beton" "${pipe[@]}")
	printf '%-52s %10.0f %-9s %8.3f\n' "ffcvfeed bench (pipeline)" "$r" "images/s" "$(echo "$r / $base" | bc -l)"
	r=$(rate_of /usr/bin/python3 scripts/torch_loader_bench.py "$folder" --workers 2 --batch-size 256 --resolution 160)
	printf '%-52s %10.0f %-9s %8.3f\n' "torchvision ImageFolder + DataLoader" "$r" "images/s" "$(echo "$r / $base" | bc -l)"
	local -a peaks
	mapfile -t peaks < <(epoch_peaks_mib 5 bin/ffcvfeed bench --data "$beton" "${pipe[@]}")
	printf '%-52s %10.1f %-9s %8s\n' "ffcvfeed bench peak RSS after epoch 1 (baseline)" "${peaks[0]}" "MiB" "1.00"
	for e in 2 5; do
		printf '%-52s %10.1f %-9s %8.3f\n' "ffcvfeed bench peak RSS after epoch $e" "${peaks[e - 1]}" "MiB" "$(echo "${peaks[e - 1]} / ${peaks[0]}" | bc -l)"
	done
}

case ${1:-} in
feed)
	ensure_go
	shift
	bench_feed "$@"
	;;
mount)
	build
	shift
	bench_mount "$@"
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
*)
	echo "usage: scripts/bench.sh write [N] | cache | mount [N] | feed [N]" >&2
	exit 2
	;;
esac
