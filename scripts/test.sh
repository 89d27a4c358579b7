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
	trap 'kill "${hogs[@]}" 2>/dev/null || true' EXIT
	echo "busy loops: ${hogs[*]}"
fi

start=$SECONDS
step "go test (timeout $timeout)"
go test ./... -count=1 -timeout "$timeout" "$@"

if (($# == 0)); then
	# The integration tests run other processes, built without the race
	# detector; the library packages are where a race would be. jpeg,
	# resize and pipeline/decode are kernels a goroutine runs alone (the
	# race detector sees none of their C, which the -asan pass checks):
	# pipeline's tests run them from many goroutines under -race.
	step "go test -race (every package but integration and the kernels)"
	go test -race -count=1 -timeout "$timeout" $(go list ./... | grep -Ev '/(integration|jpeg|resize|pipeline/decode)$')
	# The JPEG decoder's C (huff.c, idct.c, jpeg.c, restart.c) reads
	# untrusted bytes: its tests of damaged JPEGs and restart intervals, the
	# fuzz seeds among them, once more under AddressSanitizer (leak checks
	# off: the Go heap is outside their view).
	step "go test -asan (jpeg)"
	ASAN_OPTIONS=detect_leaks=0 go test -asan -count=1 -timeout "$timeout" -run 'Entropy|Corrupt|Restart|InPlace|Frame' ./jpeg
fi
echo "tests took $((SECONDS - start)) s"
