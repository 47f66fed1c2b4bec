# shellcheck shell=bash
# Shared by hack/testbin.sh and hack/nodebin.sh (source it; it defines functions and settings only):
# building pinned binaries from Go modules into ./bin, each from a throwaway Go module under
# bin/.build/<name>-<version>/, keyed by its pins. Nothing prebuilt is downloaded.

# ---- pins shared by both scripts --------------------------------------------------------------
# Kubernetes (kube-apiserver in testbin.sh; kubelet, kube-controller-manager, kube-scheduler and
# kube-proxy in nodebin.sh): k8s.io/kubernetes, with every staging module (derived from kubernetes'
# own go.mod replace block) replaced by k8s.io/<module> KUBE_STAGING_VERSION. Newest that resolves
# here: v1.37.2's module zip is refused by the proxy; v1.37.1 (go 1.26.0) resolves and builds with
# go1.26. Known good before: v1.33.4 (with ETCD_VERSION=v3.5.21).
KUBE_VERSION="${KUBE_VERSION:-v1.37.1}"
KUBE_STAGING_VERSION="${KUBE_STAGING_VERSION:-v0.${KUBE_VERSION#v1.}}"
# -------------------------------------------------------------------------------------------------

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="$ROOT/bin"
BUILD="$BIN/.build"

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GO111MODULE=on
GO="${GO:-go}"

rel() { echo "${1#"$ROOT"/}"; }

# ---- the plan: how long the builds still ahead usually take -------------------------------------
# A script that knows its builds runs them once with PLANNING=1 first (plan_start/plan_end): build
# then only adds the estimate of each build that will run to PLAN_LEFT, and the real builds print
# what is left in total, so that a newcomer knows whether to wait or walk away.
PLANNING=0 PLAN_LEFT=0 PLAN_BUILDS=0 BUILD_STARTED=0 BUILD_ESTIMATE=0

# est_secs ESTIMATE: the seconds of an estimate such as "10 min" or "5 min after kube-apiserver".
est_secs() {
	if [[ "$1" =~ ^([0-9]+)\ min ]]; then echo $((BASH_REMATCH[1] * 60)); else echo 60; fi
}

plan_start() { PLANNING=1 PLAN_LEFT=0 PLAN_BUILDS=0; }

# The builds run one after the other, each on both cores: downloading the later builds' modules in
# the background while kube-apiserver compiled saved nothing here (issue 48: the builds are
# CPU-bound on 2 cores, the module proxy is near, and the downloads took CPU from the compile).
plan_end() {
	PLANNING=0
	((PLAN_BUILDS > 0)) || return 0
	echo "to build: $PLAN_BUILDS binaries, usually about $(((PLAN_LEFT + 59) / 60)) min in total on 2 cores" \
		"(a fresh clone; later runs reuse ./bin)"
}

# plan_left: what is left of the plan, counting the current build as done after its estimate.
plan_left() {
	((PLAN_LEFT > 0)) || return 0
	local spent=$(($(date +%s) - BUILD_STARTED))
	local left=$((PLAN_LEFT - (spent < BUILD_ESTIMATE ? spent : BUILD_ESTIMATE)))
	echo "; about $(((left + 59) / 60)) min left in total"
}

# run_logged LOG LABEL CMD...: append CMD's output to LOG, printing a progress line every minute;
# on failure show the log's tail and return 1.
run_logged() {
	local log="$1" label="$2"
	shift 2
	echo "+ $*" >>"$log"
	local start lines0 pid rc=0 ticks=0
	start="$(date +%s)"
	lines0="$(wc -l <"$log")"
	"$@" >>"$log" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		sleep 2
		ticks=$((ticks + 1))
		if ((ticks % 30 == 0)); then
			echo "  ... $label: $(($(date +%s) - start))s, $(($(wc -l <"$log") - lines0)) lines of go output$(plan_left)"
		fi
	done
	wait "$pid" || rc=$?
	if ((rc != 0)); then
		echo "FAILED: $*" >&2
		echo "---- last 60 lines of $(rel "$log") ----" >&2
		tail -n 60 "$log" >&2
		return 1
	fi
}

# gomod_field MODULE@VERSION FIELD [GOTOOLCHAIN]: download a module into the module cache and
# print one field (Dir, GoMod, ...) of `go mod download -json`. Runs in its own tiny module so that
# the project's go.mod is never read or touched.
gomod_field() {
	local dl="$BUILD/.download"
	mkdir -p "$dl"
	[[ -f "$dl/go.mod" ]] || printf 'module testbin/download\n\ngo 1.24\n' >"$dl/go.mod"
	local out
	if ! out="$(cd "$dl" && GOTOOLCHAIN="${3:-local}" "$GO" mod download -json "$1" 2>&1)" ||
		grep -q '"Error":' <<<"$out"; then
		echo "FAILED: go mod download $1" >&2
		echo "$out" >&2
		return 1
	fi
	sed -n 's/^[[:space:]]*"'"$2"'": "\(.*\)",\{0,1\}$/\1/p' <<<"$out"
}

# go_header GOMOD: the go and godebug lines of a go.mod, to be copied into a throwaway module so
# the binary gets the same language version and GODEBUG defaults as an upstream build.
go_header() {
	awk '/^go /{print} /^godebug \(/{b=1} b{print} b&&/^\)/{b=0} /^godebug [^(]/{print}' "$1"
}

# link LINK TARGET: make a relative symlink, only if it does not already point there.
link() {
	if [[ "$(readlink "$1" 2>/dev/null || true)" != "$2" ]]; then
		ln -sfn "$2" "$1"
	fi
}

# replace_if_changed NEW FILE: move NEW over FILE when their contents differ ("wrote FILE"),
# otherwise drop NEW, so FILE's timestamp only moves when it really changes.
replace_if_changed() {
	if cmp -s "$1" "$2"; then
		rm -f "$1"
	else
		mv -f "$1" "$2"
		echo "wrote $(rel "$2")"
	fi
}

# up_to_date NAME VERSION PINS: whether bin/NAME-VERSION exists and was built with PINS.
up_to_date() {
	local out="$BIN/$1-$2" stamp="$BIN/.$1-$2.pins"
	[[ -x "$out" && -f "$stamp" && "$(cat "$stamp")" == "$3" ]]
}

# build NAME VERSION PINS PACKAGES ESTIMATE LDFLAGS GENCMD [GOTOOLCHAIN]
#   PACKAGES: one main package, built into the file bin/NAME-VERSION; or several (separated by
#   spaces), built by one `go build` into the directory bin/NAME-VERSION/ (one binary each). With
#   BUILD_OUT_DIR=1 in the environment, a single package goes into the directory too.
#   GENCMD: a function, with leading arguments separated by spaces, called as GENCMD... DIR LOG; it
#   writes go.mod into DIR (the throwaway module).
#   Build tags: BUILD_TAGS (comma separated) from the environment; cgo: CGO_ENABLED likewise.
#   A build that failed is not tried again with the same pins unless $RETRY_VAR (the name of a
#   variable, FLUX_RETRY unless set) is 1. Returns 1 on failure.
build() {
	local name="$1" version="$2" pins="$3" pkg="$4" estimate="$5" ldflags="$6" gen="$7"
	local toolchain="${8:-local}"
	local out="$BIN/$name-$version" failed="$BIN/.$name-$version.failed"
	local dir="$BUILD/$name-$version"
	local log="$dir/build.log"
	if up_to_date "$name" "$version" "$pins"; then
		((PLANNING)) || echo "$name $version: up to date ($(rel "$out"))"
		return 0
	fi
	local retry="${RETRY_VAR:-FLUX_RETRY}"
	if [[ "${!retry:-}" != 1 && -f "$failed" && "$(cat "$failed")" == "$pins" ]]; then
		((PLANNING)) && return 0
		echo "$name $version: failed before with the same pins, not tried again ($retry=1 to retry;" \
			"log: $(rel "$log"))" >&2
		return 1
	fi
	if ((PLANNING)); then
		PLAN_LEFT=$((PLAN_LEFT + $(est_secs "$estimate"))) PLAN_BUILDS=$((PLAN_BUILDS + 1))
		return 0
	fi
	rm -rf "$dir" "$failed"
	mkdir -p "$dir"
	local start genv built=0
	read -ra genv <<<"$gen"
	start="$(date +%s)"
	BUILD_STARTED="$start" BUILD_ESTIMATE="$(est_secs "$estimate")"
	echo "building $name $version with go $toolchain (cold build takes ~$estimate on 2 cores$(plan_left))..."
	echo "  started $(date '+%Y-%m-%d %H:%M:%S'); go output: $(rel "$log")"
	echo "# $pins" >"$log"
	"${genv[@]}" "$dir" "$log" && _build "$name" "$pkg" "$ldflags" "$toolchain" "$dir" "$log" "$out" && built=1
	PLAN_LEFT=$((PLAN_LEFT > BUILD_ESTIMATE ? PLAN_LEFT - BUILD_ESTIMATE : 0)) BUILD_ESTIMATE=0
	if ((!built)); then
		echo "$pins" >"$failed"
		echo "  $name $version: build FAILED after $(($(date +%s) - start))s (log: $(rel "$log"))" >&2
		return 1
	fi
	if [[ -d "$out.tmp" ]]; then
		rm -rf "$out"
	fi
	mv -f "$out.tmp" "$out"
	echo "$pins" >"$BIN/.$name-$version.pins"
	echo "  built in $(($(date +%s) - start))s ($(rel "$out"))"
}

_build() {
	local name="$1" pkg="$2" ldflags="$3" toolchain="$4" dir="$5" log="$6" out="$7"
	local pkgv p o="$out.tmp" tags=()
	read -ra pkgv <<<"$pkg"
	{
		cat <<-EOF
			//go:build tools

			// Package tools only records the dependency on the binary's main package.
			package tools

		EOF
		for p in "${pkgv[@]}"; do
			echo "import _ \"$p\""
		done
	} >"$dir/tools.go"
	if ((${#pkgv[@]} > 1)) || [[ "${BUILD_OUT_DIR:-}" == 1 ]]; then
		rm -rf "$o"
		mkdir -p "$o"
		o="$o/"
	fi
	if [[ -n "${BUILD_TAGS:-}" ]]; then
		tags=(-tags "$BUILD_TAGS")
	fi
	# -e: a refused module that is only needed by some dependency's tests must not stop us; the
	# build below fails loudly if something it really needs is missing.
	run_logged "$log" "$name: go mod tidy" env -C "$dir" GOTOOLCHAIN="$toolchain" "$GO" mod tidy -e -v ||
		return 1
	{ grep -E '(403 Forbidden|404 Not Found|410 Gone)' "$log" || true; } |
		grep -oE '[^ :]+@[^ :]+: reading [^ ]+: [0-9]{3}' | awk '{print $1, $4}' | sort -u | head -n 12 |
		sed 's/^/  note: go mod tidy -e: refused: /'
	run_logged "$log" "$name: go build" env -C "$dir" GOTOOLCHAIN="$toolchain" "$GO" build -v -trimpath -buildvcs=false \
		"${tags[@]}" -ldflags="-s -w $ldflags" -o "$o" "${pkgv[@]}" || {
		{ grep -oE 'missing go.sum entry for module providing package [^ ]+' "$log" || true; } |
			sort -u | sed 's/^missing go.sum entry for module providing package /  unavailable package: /' >&2
		return 1
	}
}

# ---- throwaway modules: GENCMD functions for build --------------------------------------------
# gen_require MODPATH MODULE VERSION DIR LOG: a module MODPATH that requires MODULE VERSION, with
# MODULE's go and godebug lines.
gen_require() {
	local modpath="$1" module="$2" version="$3" dir="$4" gomod
	gomod="$(gomod_field "$module@$version" GoMod)" || return 1
	{
		echo "module $modpath"
		echo
		go_header "$gomod"
		echo
		echo "require $module $version"
	} >"$dir/go.mod"
}

# gen_kubernetes MODPATH DIR LOG: a module MODPATH that requires k8s.io/kubernetes KUBE_VERSION
# and replaces each of its staging modules with k8s.io/<module> KUBE_STAGING_VERSION. Modules
# generated this way differ only in MODPATH, so their builds share the Go build cache.
gen_kubernetes() {
	local modpath="$1" dir="$2" gomod
	gomod="$(gomod_field "k8s.io/kubernetes@$KUBE_VERSION" GoMod)" || return 1
	local staging
	staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$gomod")"
	if [[ -z "$staging" ]]; then
		echo "FAILED: no staging replace directives found in $gomod" >&2
		return 1
	fi
	{
		echo "module $modpath"
		echo
		go_header "$gomod"
		echo
		echo "require k8s.io/kubernetes $KUBE_VERSION"
		echo
		echo "replace ("
		local m
		for m in $staging; do
			echo "	$m => $m $KUBE_STAGING_VERSION"
		done
		echo ")"
	} >"$dir/go.mod"
	echo "  $(wc -w <<<"$staging") staging modules replaced with $KUBE_STAGING_VERSION"
}

# kube_version_ldflags: the -X flags that stamp KUBE_VERSION into a Kubernetes binary (what
# `--version` prints and what the API server reports).
kube_version_ldflags() {
	local minor="${KUBE_VERSION#v1.}" p flags=""
	minor="${minor%%.*}"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		flags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
		flags+=" -X $p.gitTreeState=clean"
	done
	echo "$flags"
}
