#!/usr/bin/env bash
# Runs the project's checks: installs what is missing (Debian packages, Go
# modules), then gofmt, go vet and go test. Extra arguments go to go test:
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -run Fixture -v # some tests, verbosely
#
# With CI=true in the environment, tests fail instead of skipping when a
# prerequisite (a fixture, a tool, /dev/fuse) is missing.
set -euo pipefail

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

step "go test"
go test ./... -count=1 "$@"

if (($# == 0)); then
	step "go test -race -short (every package)"
	go test -race -short -count=1 ./...
fi
