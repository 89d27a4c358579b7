# shellcheck shell=bash
# Training from storage (bench.sh storage, link, disk, cluster): versitygw,
# toxiproxy, nginx and the mounts over them; sourced by scripts/bench.sh,
# whose helpers they use.

# What bench_storage started, for storage_cleanup.
STORAGE_TMP=
STORAGE_PIDS=()
STORAGE_MOUNT_PID=
STORAGE_RSS=0

# build_storage: the commands and tools the storage benchmarks run, in bin/.
build_storage() {
	mkdir -p bin
	local t
	for t in cmd/ffcvfs cmd/ffcvfeed tools/storagebench tools/statsq; do
		go build -o "bin/${t#*/}" "./$t" || die "go build ./$t failed"
	done
}

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
	bin/statsq "$1" 'peers.storage_bytes|cache.bytes_read'
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
	build_storage
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
	build_storage
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
		waits=$(bin/statsq "$STORAGE_TMP/mnt" cache.tier_this_epoch.waits)
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
			mem=$(for m in "${mnts[@]}"; do bin/statsq "$m" 'cache.budget_bytes+peers.cache_bytes?'; done | sort -g | tail -n 1)
			mem=$((mem >> 20))
			if [[ -n ${CLUSTER_DEBUG:-} ]]; then
				for m in "${mnts[@]}"; do
					echo "$m owned, reasons, held, tiers: $(bin/statsq "$m" 'peers.pages_owned?' 'peers.storage_reasons?' 'peers.held_reads?' 'cache.tiers.tiers?')" >&2
				done
			fi
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
