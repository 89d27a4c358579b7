#!/usr/bin/env bash
# A walk through ffcvfs on synthetic data: installs what is missing, builds
# bin/ffcvfs, makes a sample ImageFolder tree, converts it to a .beton, and
# inspects and verifies the result.
#
# Environment:
#   DEMO_DIR         where the data goes (default: demo-data/ in the repository,
#                    which git ignores); the demo replaces only its own files there
#   DEMO_CLASSES     number of classes (default 10)
#   DEMO_PER_CLASS   images per class (default 100)
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$(repo_root)

demo_dir=${DEMO_DIR:-$root/demo-data}
mkdir -p "$demo_dir"
demo_dir=$(cd "$demo_dir" && pwd) # DEMO_DIR may be relative to where the demo was started
classes=${DEMO_CLASSES:-10}
per_class=${DEMO_PER_CLASS:-100}
images=$demo_dir/imagefolder
beton=$demo_dir/demo.beton
cd "$root"

# say TEXT...: explain what a step does or shows.
say() {
	printf '    %s\n' "$@"
}

step "1. dependencies"
ensure_demo_deps
say "Debian packages (${FFCVFS_APT_BUILD[*]} ${FFCVFS_APT_PYTHON[*]}), Go and the Go modules are in place."

step "2. build bin/ffcvfs"
go build -o bin/ffcvfs ./cmd/ffcvfs || die "building ./cmd/ffcvfs failed"
say "built $root/bin/ffcvfs"

step "3. a sample ImageFolder tree"
say "$classes classes × $per_class synthetic images, 160-480 px per side;" \
	"every 10th image is a PNG, the rest are JPEGs (quality 90)."
rm -rf "$images"
go run ./tools/mkimagefolder -out "$images" -classes "$classes" -per-class "$per_class" -seed 1
files=("$images"/cls00/*)
say "cls00/ holds ${#files[@]} files:"
for f in "${files[@]:0:12}"; do say "  ${f##*/}"; done
say "  ..."

step "4. ffcvfs write: ImageFolder → .beton"
say "Images whose longer side is over 256 px are resized and re-encoded; JPEGs that" \
	"already fit are stored byte for byte; PNGs are encoded as JPEG. On a terminal a" \
	"progress bar runs while it works. The summary line counts images, classes and" \
	"pages, and how many JPEGs were stored verbatim."
rm -f "$beton"
bin/ffcvfs write --max-resolution 256 --classes-out "$demo_dir/classes.txt" "$images" "$beton"
say "class names in label order, written by --classes-out to $demo_dir/classes.txt:"
while IFS= read -r c; do say "  $c"; done < <(head -n 3 "$demo_dir/classes.txt")
say "  ..."

step "5. ffcvfs info"
say "The header, the fields (image and label), how full the pages are, image size" \
	"statistics, and with --samples 3 the first three samples' values."
bin/ffcvfs info --samples 3 "$beton"

step "6. ffcvfs verify"
say "Checks the file against the rules of the format and reads every page once."
bin/ffcvfs verify "$beton"

step "7. ffcvfs mount"
npages=$(bin/ffcvfs info "$beton" | awk '$1 == "pages" { print $2; exit }')
holds="holds all of it"
((${npages:-3} <= 2)) || holds="holds two of them at a time"
say "Mounts the beton read-only as an ImageFolder tree, in the background, with a" \
	"page cache of at most 16 MiB, two pages of 8 MiB (never more than the beton's pages);" \
	"the beton has ${npages:-?} data page(s), so the cache $holds. The hidden .ffcvfs" \
	"folder holds the control files."
mnt="$demo_dir/mnt"
mkdir -p "$mnt"
if mountpoint -q "$mnt" 2>/dev/null; then bin/ffcvfs umount "$mnt"; fi
# --background returns once the tree can be read (or with the mount's error).
bin/ffcvfs mount --background --cache-size 16MiB --log-file "$demo_dir/mount.log" --classes "$demo_dir/classes.txt" "$beton" "$mnt" ||
	die "the mount did not come up (its log: $demo_dir/mount.log)"
# Unmount however the script ends, so a failed step leaves no mount behind.
trap 'bin/ffcvfs umount --lazy "$mnt" 2>/dev/null || true' EXIT
# sed, not head: head leaves as soon as it has its lines, and ls, still
# writing, would die of SIGPIPE, which pipefail makes the demo's failure.
cls=$(ls "$mnt" | sed -n 1p)
say "ls $mnt | sed -n 1,3p; ls -l $mnt/$cls | sed -n 1,4p:"
ls "$mnt" | sed -n 1,3p
ls -l "$mnt/$cls" | sed -n 1,4p

step "8. torchvision's ImageFolder over the mount"
say "Unchanged torchvision code reads the mount. A DataLoader with 2 workers reads one" \
	"epoch in the quasi-random order of the ffcvfs package's sampler (python/), which announces it to" \
	"the page cache, so each page is read from the beton once."
# ffcvfs stats samples the mount while the epoch runs (5 s: the epoch
# starts once torch is imported).
PYTHONPATH="$(repo_root)/python" /usr/bin/python3 - "$mnt" >"$demo_dir/epoch.txt" <<'PY' &
import json, sys
import torch
from torchvision.datasets import ImageFolder
from ffcvfs import QuasiRandomSampler

root = sys.argv[1]
ds = ImageFolder(root)
print(f"ImageFolder: {len(ds)} images, {len(ds.classes)} classes, first: {ds.samples[0]}")
img, label = ds[0]
print(f"sample 0: a {img.size[0]}x{img.size[1]} {img.mode} image of class {ds.classes[label]!r}")
loader = torch.utils.data.DataLoader(ImageFolder(root, loader=lambda p: len(open(p, "rb").read())),
                                     batch_size=32, num_workers=2, sampler=QuasiRandomSampler(root, seed=0))
n = sum(len(sizes) for sizes, _ in loader)
st = json.load(open(f"{root}/.ffcvfs/stats.json"))
print(f"one epoch: {n} files; pages read from the beton: {st['cache']['pages_read']} "
      f"(of {st['pages']}), hits {st['cache']['hits']}, misses {st['cache']['misses']}")
PY
epoch_pid=$!
say "ffcvfs stats --once --interval 5s $mnt: 5 seconds of the epoch, as 'ffcvfs stats' shows it live:"
bin/ffcvfs stats --once --interval 5s "$mnt"
wait "$epoch_pid" || die "the epoch over the mount failed"
cat "$demo_dir/epoch.txt"

step "9. ffcvfeed through the mount"
say "ffcvfeed reads the beton through the mount (.ffcvfs/dataset.beton, announcing its" \
	"order), decodes only each crop's region, and hands 64x64 uint8 batches to Python" \
	"through shared memory; the ffcvfs package's Loader yields them as NumPy arrays without copying."
go build -o bin/ffcvfeed ./cmd/ffcvfeed
sock="$demo_dir/feed.sock"
rm -f "$sock"
bin/ffcvfeed serve --data "$mnt" --socket "$sock" --batch-size 64 --resolution 64 --epochs 1 --cache-size 32MiB 2>"$demo_dir/feed.log" &
feed_pid=$!
PYTHONPATH="$(repo_root)/python" /usr/bin/python3 - "$sock" <<'PY'
import sys
from ffcvfs import Loader
with Loader(sys.argv[1]) as loader:  # waits for the server to come up
    n = 0
    for images, labels in loader:
        n += len(labels)
    print(f"one epoch from ffcvfeed: {n} images in {len(loader)} batches; last batch {images.shape} {images.dtype}")
PY
wait "$feed_pid"
say "ffcvfeed bench: the same pipeline with no consumer, its images/s:"
bin/ffcvfeed bench --data "$beton" --resolution 64 --batch-size 64 | grep '^total:'

step "10. unmount"
bin/ffcvfs umount "$mnt"
trap - EXIT
say "unmounted $mnt"

step "done"
say "The data is in $demo_dir; delete it when you no longer need it."
