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
ensure_deps
say "Debian packages (${FFCVFS_APT_PACKAGES[*]}), Go and the Go modules are in place."

step "2. build bin/ffcvfs"
go build -o bin/ffcvfs ./cmd/ffcvfs || die "building ./cmd/ffcvfs failed"
say "built $root/bin/ffcvfs"

step "3. a sample ImageFolder tree"
say "$classes classes × $per_class synthetic images, 160-480 px per side;" \
	"every 10th image is a PNG, the rest are JPEGs (quality 90)."
rm -rf "$images"
go run ./scripts/mkimagefolder -out "$images" -classes "$classes" -per-class "$per_class" -seed 1
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

# ---------------------------------------------------------------------------
# Later steps, added here as the features land:
#
# TODO(mount): mount the beton read-only with `bin/ffcvfs mount "$beton" MNT`
#   in the background, wait until MNT shows the class folders, and list a few
#   files.
# TODO(torchvision): read MNT with torchvision.datasets.ImageFolder, using the
#   Debian python3 (/usr/bin/python3, where python3-torchvision is installed),
#   and compare its classes with classes.txt.
# TODO(ffcvfeed): start the ffcvfeed sidecar on the beton and read a few
#   batches from it.
# TODO(unmount): unmount MNT (fusermount3 -u), also from an EXIT trap so that
#   a failed step leaves no mount behind.
# ---------------------------------------------------------------------------

step "done"
say "The data is in $demo_dir; delete it when you no longer need it."
