# shellcheck shell=bash
# Unchanged torchvision code over the mount (bench.sh legacy, metrics, scan):
# sourced by scripts/bench.sh, whose helpers they use.

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
		"FUSE requests of the last mount: $(bin/statsq "$mnt" fuse.requests)"
	legacy_cleanup
	trap - EXIT INT TERM
}
