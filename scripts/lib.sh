# shellcheck shell=bash
# Shared shell functions for the scripts in scripts/. Source it, don't run it:
#
#   source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
#
# It sets no shell options of its own; the sourcing script decides those.

# Debian 12 packages the project needs, in three groups. Add new system
# dependencies to the group that uses them.
#
# FFCVFS_APT_BUILD: the build and mounting: libjpeg-turbo and a C toolchain
# for the cgo JPEG code, FUSE for mounts.
FFCVFS_APT_BUILD=(
	fuse3
	libjpeg62-turbo-dev
	pkg-config
	gcc
)
# FFCVFS_APT_PYTHON: what the demo's and the README's Python uses
# (torchvision, NumPy, Pillow).
FFCVFS_APT_PYTHON=(
	python3-torchvision
	python3-numpy
	python3-pil
)
# FFCVFS_APT_TEST: what only the tests use beside those: venv, pip,
# setuptools and wheel to install python/ as a package, prometheus (with
# promtool) and tmux for the tests of the metrics and of 'ffcvfs stats',
# curl for the README's S3 upload, git to test a fresh clone, xz-utils for
# scripts/device-check.sh's folder, jpegtran for arithmetic-coded JPEGs.
FFCVFS_APT_TEST=(
	python3-venv
	python3-pip
	python3-setuptools
	python3-wheel
	prometheus
	tmux
	curl
	git
	file
	xz-utils
	libjpeg-turbo-progs
)
# FFCVFS_APT_ARM64: building for linux/arm64 without emulation (Debian's
# cross compiler and, from the arm64 architecture added to dpkg, the arm64
# libjpeg-turbo to link), and qemu-user-static to run arm64 tests here.
FFCVFS_APT_ARM64=(
	gcc-aarch64-linux-gnu
	libjpeg62-turbo-dev:arm64
	qemu-user-static
)
FFCVFS_APT_PACKAGES=("${FFCVFS_APT_BUILD[@]}" "${FFCVFS_APT_PYTHON[@]}" "${FFCVFS_APT_TEST[@]}")

# The oldest Go release the scripts accept.
FFCVFS_MIN_GO=1.24

# log MSG...: a line on stderr, prefixed with the script's name.
log() {
	printf '%s: %s\n' "$(basename "$0")" "$*" >&2
}

# die MSG...: log MSG and exit with status 1.
die() {
	log "error: $*"
	exit 1
}

# step TITLE: a header line, on stdout, for one step of a script.
step() {
	printf '\n==> %s\n' "$*"
}

# repo_root: the repository's top folder (the one holding go.mod).
repo_root() {
	(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
}

# as_root CMD...: run CMD as root, through sudo when not root already.
as_root() {
	if [[ $EUID -eq 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null 2>&1; then
		sudo "$@"
	else
		die "need root to run '$*': run this script as root or install sudo"
	fi
}

# ensure_apt PKG...: install those of the Debian packages PKG... that are not
# installed yet, after one 'apt-get update'. Does nothing when all are there.
# apt-get's output goes to stderr, so that a function that prints its result
# on stdout may call it.
ensure_apt() {
	local missing=() pkg
	local native
	native=$(dpkg --print-architecture)
	for pkg in "$@"; do
		# One line per architecture installed (multiarch): a name without
		# one wants this machine's own (or an architecture-free package).
		if [[ $pkg == *:* ]]; then
			dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -qx "install ok installed" || missing+=("$pkg")
		else
			dpkg-query -W -f='${Status} ${Architecture}\n' "$pkg" 2>/dev/null | grep -Eqx "install ok installed ($native|all)" || missing+=("$pkg")
		fi
	done
	((${#missing[@]})) || return 0
	command -v apt-get >/dev/null 2>&1 ||
		die "missing packages ${missing[*]}, and there is no apt-get to install them (these scripts expect Debian 12)"
	log "installing ${missing[*]}"
	if [[ -z "${_FFCVFS_APT_UPDATED:-}" ]]; then
		as_root apt-get update -q >&2 || die "apt-get update failed"
		_FFCVFS_APT_UPDATED=1
	fi
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 ||
		die "could not install ${missing[*]}"
}

# ensure_arm64: what building and testing for linux/arm64 needs
# (FFCVFS_APT_ARM64), adding arm64 to dpkg's architectures first.
ensure_arm64() {
	if ! dpkg --print-foreign-architectures | grep -qx arm64; then
		log "adding Debian's arm64 architecture (multiarch) for libjpeg62-turbo-dev:arm64"
		as_root dpkg --add-architecture arm64 || die "dpkg --add-architecture arm64 failed"
		unset _FFCVFS_APT_UPDATED # the arm64 package lists are not there yet
	fi
	ensure_apt "${FFCVFS_APT_ARM64[@]}"
}

# ensure_go: make sure a Go toolchain ≥ FFCVFS_MIN_GO is on PATH, adding
# /usr/local/go/bin when go is not found otherwise.
ensure_go() {
	if ! command -v go >/dev/null 2>&1; then
		if [[ -x /usr/local/go/bin/go ]]; then
			export PATH="$PATH:/usr/local/go/bin"
		else
			die "go not found on PATH or in /usr/local/go/bin; install Go $FFCVFS_MIN_GO or newer (https://go.dev/dl/)"
		fi
	fi
	local have
	# Asked outside the repository, so that go.mod's toolchain line plays no part.
	have=$(cd / && go env GOVERSION) || die "'go env GOVERSION' failed"
	have=${have#go}
	local hmaj hmin wmaj wmin
	IFS=. read -r hmaj hmin _ <<<"$have"
	IFS=. read -r wmaj wmin _ <<<"$FFCVFS_MIN_GO"
	hmin=${hmin%%[!0-9]*} # 1.23rc1 → 23
	if ! [[ "$hmaj" =~ ^[0-9]+$ && "$hmin" =~ ^[0-9]+$ ]]; then
		die "cannot read the Go version from '$have'"
	fi
	if ((hmaj < wmaj || (hmaj == wmaj && hmin < wmin))); then
		die "Go $have at $(command -v go) is too old: need Go $FFCVFS_MIN_GO or newer"
	fi
}

# The S3 server that tests run on loopback (internal/s3test), and the
# version installed when it is missing.
FFCVFS_VERSITYGW_MODULE=github.com/versity/versitygw/cmd/versitygw
FFCVFS_VERSITYGW_VERSION=v1.8.0

# ensure_versitygw: make sure versitygw is on PATH: found there, or in Go's
# bin folder ($(go env GOBIN), else $(go env GOPATH)/bin), which is then
# added to PATH; otherwise 'go install'ed there. Needs ensure_go first.
# versitygw's go.mod may ask for a newer Go than the one installed: the go
# command then fetches that toolchain itself (GOTOOLCHAIN=auto).
ensure_versitygw() {
	command -v versitygw >/dev/null 2>&1 && return 0
	local gobin
	gobin=$(go_bin) || die "'go env GOPATH' failed"
	if [[ ! -x "$gobin/versitygw" ]]; then
		log "installing versitygw $FFCVFS_VERSITYGW_VERSION into $gobin"
		# Outside the repository, so that its go.mod plays no part.
		(cd / && go install "$FFCVFS_VERSITYGW_MODULE@$FFCVFS_VERSITYGW_VERSION") ||
			die "could not install versitygw: go install $FFCVFS_VERSITYGW_MODULE@$FFCVFS_VERSITYGW_VERSION failed"
	fi
	export PATH="$PATH:$gobin"
	command -v versitygw >/dev/null 2>&1 || die "versitygw is not in $gobin after installing it"
}

# The proxy that tests and benchmarks put between a client and the S3 server
# to add latency, bandwidth limits and faults, and the version installed when
# it is missing.
FFCVFS_TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2
FFCVFS_TOXIPROXY_VERSION=v2.5.0

# ensure_toxiproxy: make sure toxiproxy-server (and toxiproxy-cli) are on
# PATH: found there, or in Go's bin folder, which is then added to PATH;
# otherwise built there. 'go install' would name them server and cli after
# their package folders, so they are installed into a folder of their own
# and linked under their usual names. Needs ensure_go first.
ensure_toxiproxy() {
	command -v toxiproxy-server >/dev/null 2>&1 && return 0
	local gobin
	gobin=$(go_bin) || die "'go env GOPATH' failed"
	if [[ ! -x "$gobin/toxiproxy-server" ]]; then
		local dir="$gobin/toxiproxy-$FFCVFS_TOXIPROXY_VERSION"
		log "installing toxiproxy $FFCVFS_TOXIPROXY_VERSION into $gobin"
		(cd / && GOBIN="$dir" go install \
			"$FFCVFS_TOXIPROXY_MODULE/cmd/server@$FFCVFS_TOXIPROXY_VERSION" \
			"$FFCVFS_TOXIPROXY_MODULE/cmd/cli@$FFCVFS_TOXIPROXY_VERSION") ||
			die "could not install toxiproxy: go install $FFCVFS_TOXIPROXY_MODULE/cmd/{server,cli}@$FFCVFS_TOXIPROXY_VERSION failed"
		ln -sf "$dir/server" "$gobin/toxiproxy-server"
		ln -sf "$dir/cli" "$gobin/toxiproxy-cli"
	fi
	export PATH="$PATH:$gobin"
	command -v toxiproxy-server >/dev/null 2>&1 || die "toxiproxy-server is not in $gobin after installing it"
}

# go_bin: the folder 'go install' puts commands in: $(go env GOBIN), else the
# bin folder of the first entry of $(go env GOPATH).
go_bin() {
	local gobin
	gobin=$(cd / && go env GOBIN) || return 1
	if [[ -z "$gobin" ]]; then
		gobin=$(cd / && go env GOPATH) || return 1
		gobin=${gobin%%:*}/bin
	fi
	printf '%s\n' "$gobin"
}

# The linter scripts/test.sh runs, and the version installed when it is
# missing (or another version is on PATH): staticcheck's release 2026.2.2
# is the module version v0.8.2, the form the Go module proxy serves.
FFCVFS_STATICCHECK_MODULE=honnef.co/go/tools/cmd/staticcheck
FFCVFS_STATICCHECK_VERSION=v0.8.2

# ensure_go_tool NAME MODULE VERSION ARG MATCH: make sure the Go program
# NAME at VERSION is in Go's bin folder (its output for ARG holds MATCH),
# 'go install'ing MODULE@VERSION there if not, and print its path. Needs
# ensure_go first.
ensure_go_tool() {
	local name=$1 module=$2 version=$3 arg=$4 match=$5 gobin
	gobin=$(go_bin) || die "'go env GOPATH' failed"
	if ! "$gobin/$name" "$arg" 2>/dev/null | grep -qF "$match"; then
		log "installing $name $version into $gobin"
		(cd / && go install "$module@$version") >&2 ||
			die "could not install $name: go install $module@$version failed"
	fi
	printf '%s
' "$gobin/$name"
}

# ensure_staticcheck: ensure_go_tool for staticcheck
# FFCVFS_STATICCHECK_VERSION.
ensure_staticcheck() {
	ensure_go_tool staticcheck "$FFCVFS_STATICCHECK_MODULE" "$FFCVFS_STATICCHECK_VERSION" -version "(${FFCVFS_STATICCHECK_VERSION#v})"
}

# gotestsum prints each test as it ends, so that a long package (the
# integration tests, minutes) is not silent.
FFCVFS_GOTESTSUM_MODULE=gotest.tools/gotestsum
FFCVFS_GOTESTSUM_VERSION=v1.13.0

# ensure_gotestsum: ensure_go_tool for gotestsum FFCVFS_GOTESTSUM_VERSION.
ensure_gotestsum() {
	ensure_go_tool gotestsum "$FFCVFS_GOTESTSUM_MODULE" "$FFCVFS_GOTESTSUM_VERSION" --version "$FFCVFS_GOTESTSUM_VERSION"
}

# ensure_deps: everything the tests need: the Debian packages in
# FFCVFS_APT_PACKAGES, Go, the Go modules of go.mod, versitygw and toxiproxy.
ensure_deps() {
	ensure_apt "${FFCVFS_APT_PACKAGES[@]}"
	ensure_arm64
	ensure_go
	(cd "$(repo_root)" && go mod download) || die "go mod download failed"
	ensure_versitygw
	ensure_toxiproxy
}

# ensure_demo_deps: what scripts/demo.sh uses, and nothing more: the build's
# and Python's Debian packages, Go and the Go modules of go.mod.
ensure_demo_deps() {
	ensure_apt "${FFCVFS_APT_BUILD[@]}" "${FFCVFS_APT_PYTHON[@]}"
	ensure_go
	(cd "$(repo_root)" && go mod download) || die "go mod download failed"
}

# FFCV 1.0.x, the last release's code.
FFCV_COMMIT=3a12966b3afe3a81733a732e633317d747bfaac7

# ffcv_src: the folder of FFCV's source with its extension built in place,
# from Debian's packages (Numba, OpenCV, libturbojpeg); prints nothing, and
# says why on stderr, when it cannot be had.
ffcv_src() {
	local dir=${FFCV_SRC:-${FFCVFS_CACHE:-$HOME/.cache/ffcvfs}/ffcv-src}
	[[ ${FFCV:-1} != 0 ]] || return 0
	if [[ ! -f $dir/setup.py ]]; then
		if ! git clone -q https://github.com/libffcv/ffcv "$dir" >&2 || ! git -C "$dir" checkout -q "$FFCV_COMMIT" >&2; then
			rm -rf "$dir"
			log "FFCV left out: cannot clone https://github.com/libffcv/ffcv (set FFCV_SRC to a checkout)"
			return 0
		fi
	fi
	ensure_apt python3-numba python3-opencv libopencv-dev libturbojpeg0-dev python3-tqdm python3-psutil python3-dev g++ pkg-config
	if ! compgen -G "$dir/ffcv/_libffcv*.so" >/dev/null; then
		if ! (cd "$dir" && /usr/bin/python3 setup.py build_ext --inplace) >&2; then
			log "FFCV left out: its extension did not build in $dir"
			return 0
		fi
	fi
	echo "$dir"
}
