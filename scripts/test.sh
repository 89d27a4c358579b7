#!/usr/bin/env bash
# Runs the project's checks: installs what is missing (Debian packages, Go
# modules, staticcheck), then gofmt, go vet, staticcheck and go test. Extra arguments go to go test:
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -run Fixture -v # some tests, verbosely
#   scripts/test.sh --busy          # everything, while two busy loops
#                                   # occupy two cores, as on a training
#                                   # machine (or a slow, shared CI host)
#
# Everything is: go test of every package; beside it, go test -race -short
# of the library packages and the JPEG decoder's tests under
# AddressSanitizer, and the wheels of scripts/wheel.sh for linux/amd64 and
# linux/arm64 followed by the packages with C code cross-compiled for
# linux/arm64 and run by qemu-user-static with -short (ARM64_PACKAGES
# below), integration's TestWheel* over those wheels (FFCVFS_WHEELS) between.
#
# With CI=true in the environment, tests fail instead of skipping when a
# prerequisite (a fixture, a tool, /dev/fuse) is missing. Tests wait on
# conditions, never on time, so they pass on a busy machine; go test's
# -timeout is FFCVFS_TEST_TIMEOUT (default 30m) per pass, far above a quiet
# run's length, so that only a hang reaches it.
set -euo pipefail

busy=0
if [[ "${1:-}" == "--busy" ]]; then
	busy=1
	shift
fi
timeout=${FFCVFS_TEST_TIMEOUT:-30m}
# The packages with C code (cgo), or that run it, tested on arm64 under
# emulation, about 20 times slower than here: -short, the same tests over
# less data (testenv.Photos gives 3 photos; jpeg's tests of regions decode
# at scales 1/8, 3/8 and 8/8; pipeline/decode's TestFidelity makes 200
# crops; beton/imagefolder's TestReferenceFixtures takes every 7th sample).
ARM64_PACKAGES=(./jpeg ./resize ./pipeline ./pipeline/decode ./beton ./beton/imagefolder ./order ./pagecache)
# Left out there: tests of Go logic that no architecture changes (orders'
# costs and layouts, the cache's tiers and budgets, concurrency, which the
# race pass covers), and a test that runs its own binary as a child, which
# needs qemu in front.
ARM64_SKIP='^(TestFileDestinationKilled|TestScratchReuseAndConcurrency|TestResumeCostBounded|TestElasticResume|TestNodeAffine|TestCompressRAMHoldsMorePages|TestTiersBudgetAndWarmStart|TestDiskTier.*|TestHeldPages|TestBudgetHeldUnderConcurrency|TestRangesBudgetHeldUnderConcurrency)$'

# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$(repo_root)"

step "dependencies"
ensure_deps
go version

step "gofmt"
# Tracked and untracked (not ignored) Go files that exist, outside testdata
# folders, which the go tool ignores too.
go_files=()
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	while IFS= read -r -d '' f; do
		if [[ -f "$f" && "$f" != testdata/* && "$f" != */testdata/* ]]; then
			go_files+=("$f")
		fi
	done < <(git ls-files -z --cached --others --exclude-standard -- '*.go')
else
	while IFS= read -r -d '' f; do
		go_files+=("${f#./}")
	done < <(find . -name .git -prune -o -name testdata -prune -o -type f -name '*.go' -print0)
fi
if ((${#go_files[@]})); then
	unformatted=$(gofmt -l "${go_files[@]}")
	if [[ -n "$unformatted" ]]; then
		printf '%s\n' "$unformatted" >&2
		die "gofmt would change the files above; run: gofmt -w <file>"
	fi
fi
echo "${#go_files[@]} Go files are gofmt-clean"

step "go vet"
go vet ./...

step "staticcheck"
staticcheck=$(ensure_staticcheck)
"$staticcheck" ./...
echo "staticcheck: clean"

if ((busy)); then
	step "two busy loops, one per core, until the tests end"
	hogs=()
	for _ in 1 2; do
		bash -c 'while :; do :; done' &
		hogs+=($!)
	done
	echo "busy loops: ${hogs[*]}"
fi
# Left out of the race pass: heavy tests of code one goroutine runs
# (parsers of hostile input, whole-file comparisons, fuzz seeds over large
# inputs, the tiers' eviction and compression figures), which the first
# pass runs.
RACE_SKIP='^(TestCompressRAMHoldsMorePages|TestHeldPages|TestHostileIDFiles|TestFileSourceMatchesFile|FuzzMountedBeton|TestOpenImagenetSize|TestTruncateAnywhere|TestBenchChecksum|TestCorrupt|TestFuzzEncoding)$'

work= beside_pids=()
cleanup() {
	if ((busy)); then kill "${hogs[@]}" 2>/dev/null || true; fi
	local pid
	for pid in "${beside_pids[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
	if [[ -n $work ]]; then rm -rf "$work"; fi
	if [[ -n ${tests_tmp:-} ]]; then rm -rf "$tests_tmp"; fi
}
trap cleanup EXIT

# beside NAME LOG CMD...: runs CMD in a process group of its own, its output
# in LOG, beside the first pass.
beside() {
	local name=$1 log=$2
	shift 2
	set -m
	"$@" >"$log" 2>&1 &
	beside_pids+=($!)
	set +m
	echo "beside the tests: $name (pid $!)"
}

# finish PID LOG NAME: waits for a pass run beside, shows its output, and
# adds NAME to failed when it failed.
failed=()
finish() {
	local status=0
	wait "$1" || status=$?
	cat "$2"
	((status == 0)) || failed+=("$3 (exit $status)")
}

wheel_and_arm64() {
	bash scripts/wheel.sh "$work/dist" &&
		echo "==> go test -run '^TestWheel' ./integration (the wheels in a venv, an empty chroot, under qemu)" &&
		FFCVFS_WHEELS=$work/dist go test -count=1 -timeout "$timeout" -run '^TestWheel' ./integration &&
		echo "==> go test -short on linux/arm64 under qemu-aarch64-static" &&
		CGO_ENABLED=1 GOARCH=arm64 CC=aarch64-linux-gnu-gcc PKG_CONFIG_PATH=/usr/lib/aarch64-linux-gnu/pkgconfig \
			go test -short -skip "$ARM64_SKIP" -count=1 -timeout "$timeout" -exec qemu-aarch64-static -trimpath -tags netgo,osusergo \
			-ldflags '-linkmode external -extldflags -static' "${ARM64_PACKAGES[@]}"
}

race_and_asan() {
	# The integration tests run other processes, built without the race
	# detector; the library packages are where a race would be. jpeg,
	# resize and pipeline/decode are kernels a goroutine runs alone (the
	# race detector sees none of their C, which the -asan pass checks):
	# pipeline's tests run them from many goroutines under -race. -short:
	# the same tests over less data (fewer photos, trials, samples).
	echo "==> go test -race -short (every package but integration and the kernels)"
	go test -race -short -skip "$RACE_SKIP" -count=1 -timeout "$timeout" $(go list ./... | grep -Ev '/(integration|jpeg|resize|pipeline/decode)$') || return
	# The JPEG decoder's C (huff.c, idct.c, jpeg.c, restart.c) reads
	# untrusted bytes: its tests of damaged JPEGs and restart intervals, the
	# fuzz seeds among them, once more under AddressSanitizer (leak checks
	# off: the Go heap is outside their view).
	echo "==> go test -asan (jpeg)"
	ASAN_OPTIONS=detect_leaks=0 go test -asan -count=1 -timeout "$timeout" -run 'Entropy|Corrupt|Restart|InPlace|Frame' ./jpeg
}

start=$SECONDS
# The tests' temporary files go to a folder of their own, which must be
# empty when they end: a test that leaves something behind fails the run.
tests_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ffcvfs-tests-XXXXXX")
# Open to pass through, as /tmp is: tests run readers as another user
# (nobody) in folders of their own under it.
chmod 755 "$tests_tmp"
# The race pass (every package but integration: every socket the programs
# make, the tests' own) runs with a TMPDIR of 150 characters, more than a
# Unix socket's path may have (107 bytes), as a user's may be; sockets must
# find a place of their own where their path fits. The other passes run
# torch's DataLoader, which cannot (Python's multiprocessing puts a socket
# of its workers in TMPDIR) and so have a short one. Sockets go to
# XDG_RUNTIME_DIR, short, as a desktop session's.
main_dir=$tests_tmp/main
mkdir -m 755 "$main_dir"
tests_dir=$tests_tmp/a-tmpdir-longer-than-a-socket-path-
while ((${#tests_dir} < 150)); do tests_dir+=x; done
mkdir -m 755 "$tests_dir"
mkdir -m 700 "$tests_tmp/run"
export XDG_RUNTIME_DIR=$tests_tmp/run
skip=()
if (($# == 0)); then
	# Beside the first pass, whose integration tests leave a core idle
	# much of the time: the wheels, then the arm64 tests (static test
	# programs, as the wheel's, so that no arm64 C library is needed to
	# run them, and with its build flags, so that its compiled packages
	# are reused), after integration's TestWheel* over the wheels; and the
	# race and -asan passes. Their output follows the first pass's.
	work=$(mktemp -d)
	export TMPDIR=$main_dir
	step "beside the tests: the wheels, the arm64 tests under qemu-aarch64-static (${ARM64_PACKAGES[*]}), the race and -asan passes"
	beside "the wheels for linux/amd64 and linux/arm64, TestWheel*, the arm64 tests" "$work/arm64.log" wheel_and_arm64
	TMPDIR=$tests_dir beside "go test -race -short, go test -asan (TMPDIR of ${#tests_dir} characters)" "$work/race.log" race_and_asan
	skip=(-skip '^TestWheel')
fi
step "go test (timeout $timeout): each test as it ends, a package's failures in full"
gotestsum=$(ensure_gotestsum)
export TMPDIR=$main_dir
# A failure of this pass is told at the end: the passes beside it still
# finish and show what they found.
main=0
"$gotestsum" --format testname --format-hide-empty-pkg -- ./... -count=1 -timeout "$timeout" "${skip[@]}" "$@" || main=$?
((main == 0)) || failed+=("go test (exit $main; its failures are above)")

if (($# == 0)); then
	step "the race and -asan passes (run beside)"
	finish "${beside_pids[1]}" "$work/race.log" "the race or -asan pass"
	step "the wheels, their tests and the linux/arm64 tests (run beside)"
	finish "${beside_pids[0]}" "$work/arm64.log" "the wheels, their tests or the arm64 tests"
	beside_pids=()
fi
if ((${#failed[@]} > 0)); then
	die "failed after $((SECONDS - start)) s: $(printf '%s; ' "${failed[@]}")"
fi
left=$(find "$main_dir" "$tests_dir" "$XDG_RUNTIME_DIR" -mindepth 1 -maxdepth 1 -printf '%p\n' | head -20)
if [[ -n $left ]]; then
	die "the tests left these in their temporary folders (now removed):"$'\n'"$left"
fi
echo "tests took $((SECONDS - start)) s; nothing left in the temporary folder"
