#!/usr/bin/env bash
# Writes jpeg/testdata/layouts/: fixture photos re-encoded with
# the sampling factors that Go's and go-libjpeg's encoders cannot write
# (the tests make 4:4:4, 4:2:2, 4:4:0 and 4:2:0 themselves), so that the
# decoder's tests cover the layouts libjpeg accepts beyond them: Y sampled
# 4x2 (4:1:0), 4x1 (4:1:1), 1x4, 2x4 and 3x2 against chroma 1x1, and Y 2x2
# against chroma 1x2. (At most 10 blocks make an MCU, so Y 4x2 takes no
# chroma above 1x1.) Needs cjpeg and djpeg (Debian's libjpeg-turbo-progs);
# the files it writes are committed, so the tests need neither.
#
#   scripts/make_layout_jpegs.sh
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"
command -v cjpeg >/dev/null && command -v djpeg >/dev/null ||
	die "cjpeg and djpeg not found: apt-get install libjpeg-turbo-progs"
out=jpeg/testdata/layouts
mkdir -p "$out"
rm -f "$out"/*.jpg
photos=(testdata/imagefolder-small/class003/img00004.jpg testdata/imagefolder-small/class007/img00011.jpg)
layouts=("4x2,1x1,1x1:410" "4x1,1x1,1x1:411" "1x4,1x1,1x1:1x4" "2x4,1x1,1x1:2x4" "3x2,1x1,1x1:3x2" "2x2,1x2,1x2:2x2-1x2")
i=0
for photo in "${photos[@]}"; do
	for l in "${layouts[@]}"; do
		sample=${l%%:*} name=${l##*:}
		# Odd sizes on purpose: partial MCUs at the right and bottom edges.
		djpeg -scale 1/2 -ppm "$photo" | cjpeg -sample "$sample" -quality 90 >"$out/p$i-$name.jpg"
	done
	i=$((i + 1))
done
ls -l "$out"
