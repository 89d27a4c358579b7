#!/usr/bin/env bash
# Benchmark data from real photographs: an ImageFolder of N JPEGs and the
# .beton ffcvfs writes from it. See --help.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

WALLPAPER_PACKAGES=(ukui-wallpapers plasma-workspace-wallpapers)
CACHE=${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/wallpapers

usage() {
	cat <<EOF
Usage: scripts/make-bench-data.sh [--seed S] N OUT

Builds benchmark data from real photographs:

  OUT/imagefolder/class000/img0000000.jpg ... class099/...   N JPEGs, 100 classes
  OUT/bench.beton                                            ffcvfs write --restart-interval 0 of that tree
  OUT/.params                                                what they were made from

Steps:
  1. Downloads the Debian packages ${WALLPAPER_PACKAGES[*]}
     with 'apt-get download' (after 'apt-get update' only when the download fails
     without it) and unpacks them with 'dpkg -x', both into
     \${FFCVFS_CACHE:-\$HOME/.cache/ffcvfs}/wallpapers (now $CACHE).
  2. Picks the photographs among their JPEG and PNG files (under usr/share/
     wallpapers and usr/share/backgrounds) with 'mkbenchdata -select', which skips:
       - images under 600 pixels on the shorter side (the preview screenshots);
       - PNGs with an alpha channel or a tRNS chunk (logos, cut-out artwork);
       - images with fewer than 2000 distinct colours in a 256×256 grid of
         sampled pixels (flat or posterised artwork);
       - the smaller sizes of a picture that a KDE wallpaper folder holds at
         several resolutions (contents/images/WIDTHxHEIGHT.ext): only the largest
         one is kept. Dark variants (contents/images_dark) count as separate
         pictures.
     What is kept is mostly photographs, plus some rendered artwork with real
     texture and gradients; the list is saved as photos.txt in the cache.
  3. Runs tools/mkbenchdata: image i (class i mod 100) is a random crop (aspect
     3:4..4:3) of a random kept photo, resized with area averaging so that its
     shorter side is uniform in 300-500 px, and encoded with libjpeg-turbo at a
     quality uniform in 75-95. The same N, seed and photos give the same bytes.
  4. Builds bin/ffcvfs, runs 'bin/ffcvfs write --restart-interval 0 OUT/imagefolder OUT/bench.beton' (the JPEGs as they are)
     and prints the summary of 'ffcvfs info'.

Running it again with the same N and seed does nothing but print the summary,
as long as OUT/bench.beton exists and OUT/.params matches; otherwise
OUT/imagefolder and OUT/bench.beton are made anew (other files in OUT are left
alone).

Arguments:
  N          number of images, at least 100
  OUT        output folder (created if missing)
  --seed S   random seed, a non-negative integer (default 0)
  -h, --help this help

Environment:
  FFCVFS_CACHE   cache folder (default \$HOME/.cache/ffcvfs)
EOF
}

seed=0
args=()
while (($#)); do
	case $1 in
	-h | --help)
		usage
		exit 0
		;;
	--seed)
		(($# >= 2)) || die "--seed needs a value (see --help)"
		seed=$2
		shift 2
		;;
	--seed=*)
		seed=${1#--seed=}
		shift
		;;
	--)
		shift
		args+=("$@")
		break
		;;
	-*) die "unknown option $1 (see --help)" ;;
	*)
		args+=("$1")
		shift
		;;
	esac
done
((${#args[@]} == 2)) || die "expected N and OUT, got ${#args[@]} argument(s) (see --help)"
N=${args[0]}
OUT=${args[1]}
[[ $N =~ ^[0-9]+$ ]] || die "N must be a whole number, got '$N'"
N=$((10#$N))
((N >= 100)) || die "N must be at least 100 (one image per class), got $N"
((N < 10000000)) || die "N must be under 10000000, got $N"
[[ $seed =~ ^[0-9]+$ ]] || die "the seed must be a non-negative integer, got '$seed'"
[[ -n $OUT ]] || die "OUT must not be empty"
[[ ! -e $OUT || -d $OUT ]] || die "OUT ($OUT) exists and is not a folder"

ROOT=$(repo_root)
mkdir -p "$CACHE" || die "cannot create $CACHE"
CACHE=$(cd "$CACHE" && pwd)
mkdir -p "$OUT" || die "cannot create $OUT"
OUT=$(cd "$OUT" && pwd)
case $OUT/ in
"$ROOT"/*) [[ $OUT != "$ROOT" ]] || die "OUT must not be the repository itself" ;;
esac

# apt_download PKG...: apt-get download PKG... into $CACHE. Run as root, apt
# warns that its _apt user cannot write there, which is harmless: that line is
# dropped.
apt_download() {
	(cd "$CACHE" && apt-get download -q "$@" 2>&1) | { grep -v '^W: Download is performed unsandboxed' || true; }
	return "${PIPESTATUS[0]}"
}

# fetch_wallpapers: the packages' .debs in $CACHE, unpacked into $CACHE/root.
fetch_wallpapers() {
	mkdir -p "$CACHE"
	local pkg have missing=()
	for pkg in "${WALLPAPER_PACKAGES[@]}"; do
		have=$(compgen -G "$CACHE/${pkg}_*.deb" || true)
		[[ -n $have ]] || missing+=("$pkg")
	done
	if ((${#missing[@]})); then
		command -v apt-get >/dev/null 2>&1 || die "apt-get not found (this script expects Debian 12)"
		log "downloading ${missing[*]} into $CACHE"
		if ! apt_download "${missing[@]}"; then
			log "download failed; running apt-get update and trying again"
			as_root apt-get update -q || die "apt-get update failed"
			apt_download "${missing[@]}" || die "apt-get download ${missing[*]} failed"
		fi
		for pkg in "${missing[@]}"; do
			compgen -G "$CACHE/${pkg}_*.deb" >/dev/null || die "apt-get download gave no .deb for $pkg"
		done
	fi
	local deb stamp
	for deb in "$CACHE"/*.deb; do
		stamp="$CACHE/root/.unpacked-$(basename "$deb")"
		[[ -e $stamp ]] && continue
		log "unpacking $(basename "$deb")"
		mkdir -p "$CACHE/root"
		dpkg -x "$deb" "$CACHE/root" || die "dpkg -x $deb failed"
		touch "$stamp"
	done
}

# select_photos: the kept photographs, one path per line, in $CACHE/photos.txt.
select_photos() {
	local list=$CACHE/photos.txt candidates=()
	local sum
	sum=$(cd "$CACHE" && sha256sum ./*.deb "$ROOT/tools/mkbenchdata/main.go" | sha256sum | cut -c1-16)
	if [[ -s $list && -e $list.key && "$(cat "$list.key")" == "$sum" ]]; then
		return 0
	fi
	mapfile -d '' candidates < <(find "$CACHE/root/usr/share" -type f \
		\( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' \) -print0 | sort -z)
	((${#candidates[@]})) || die "the wallpaper packages hold no JPEG or PNG files under $CACHE/root/usr/share"
	step "Selecting photographs among ${#candidates[@]} image files"
	go run ./tools/mkbenchdata -select -- "${candidates[@]}" 2>"$CACHE/select.log" >"$list.tmp" || {
		cat "$CACHE/select.log" >&2
		die "selecting the photographs failed"
	}
	grep -v ': skip ' "$CACHE/select.log" >&2 || true
	log "reasons for each skipped file: $CACHE/select.log"
	mv "$list.tmp" "$list"
	printf '%s\n' "$sum" >"$list.key"
}

# took START: how long since START (an $EPOCHREALTIME).
took() {
	awk -v s="$1" -v e="$EPOCHREALTIME" 'BEGIN { printf "took %.1f s\n", e - s }'
}

summary() {
	step "ffcvfs info $OUT/bench.beton"
	bin/ffcvfs info "$OUT/bench.beton" || die "ffcvfs info failed"
	printf 'imagefolder: %s (%s)\n' "$OUT/imagefolder" "$(du -sh "$OUT/imagefolder" | cut -f1)"
}

cd "$ROOT"
ensure_apt libjpeg62-turbo-dev pkg-config gcc
ensure_go

step "Building bin/ffcvfs"
mkdir -p bin
go build -o bin/ffcvfs ./cmd/ffcvfs || die "go build ./cmd/ffcvfs failed"

step "Wallpaper packages (${WALLPAPER_PACKAGES[*]})"
fetch_wallpapers
select_photos
mapfile -t photos <"$CACHE/photos.txt"
echo "${#photos[@]} source photographs (list: $CACHE/photos.txt)"

photos_sum=$(sha256sum "${photos[@]}" | sed "s|$CACHE/root/||" | sha256sum | cut -c1-16)
gen_sum=$(sha256sum tools/mkbenchdata/main.go | cut -c1-16)
params="n=$N seed=$seed photos=$photos_sum generator=$gen_sum beton=plain"

if [[ -f $OUT/bench.beton && -f $OUT/.params && "$(cat "$OUT/.params")" == "$params" ]]; then
	log "$OUT already holds these images ($params); nothing to do"
	summary
	exit 0
fi

rm -f "$OUT/.params" "$OUT/bench.beton"
rm -rf "$OUT/imagefolder"
step "Writing $N images into $OUT/imagefolder (seed $seed, $(nproc) cores)"
start=$EPOCHREALTIME
go run ./tools/mkbenchdata -n "$N" -out "$OUT/imagefolder" -seed "$seed" -- "${photos[@]}" ||
	die "mkbenchdata failed"
took "$start"

step "ffcvfs write --restart-interval 0 $OUT/imagefolder $OUT/bench.beton"
start=$EPOCHREALTIME
# The JPEGs as they are, as FFCV's writer stores them: the benchmarks'
# plain beton (scripts/bench.sh feed writes one with restart markers).
bin/ffcvfs write --restart-interval 0 "$OUT/imagefolder" "$OUT/bench.beton" || die "ffcvfs write failed"
took "$start"
printf '%s\n' "$params" >"$OUT/.params"
summary
