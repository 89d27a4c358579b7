# shellcheck shell=bash
# ffcvfeed's benchmarks (bench.sh feed, decoded, cifar, writer): sourced by
# scripts/bench.sh, whose helpers they use.

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
