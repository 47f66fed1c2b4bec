#!/usr/bin/env bash
# Builds the pinned binaries the integration tests run against (kube-apiserver, etcd,
# source-controller, kustomize-controller) from Go modules into ./bin, and copies the Flux CRDs
# out of the module cache into ./bin/crds. Nothing prebuilt is downloaded: each binary comes from
# a throwaway Go module under bin/.build/<name>-<version>/.
#
# Every binary is keyed by its pins: bin/<name>-<version> plus bin/.<name>-<version>.pins. It is
# rebuilt only when a pin changes; otherwise this script prints "up to date" and does nothing.
#
# Outputs:
#   bin/k8s/{kube-apiserver,etcd}                         -> usable as KUBEBUILDER_ASSETS
#   bin/flux/{source-controller,kustomize-controller}
#   bin/crds/*.yaml                                       Flux CRDs (config/crd/bases of both)
#   bin/testbin.env                                       absolute paths, KEY=VALUE lines
#
# All pins can be overridden from the environment, e.g. KUBE_VERSION=v1.33.4 hack/testbin.sh
set -euo pipefail

# ---- pins -------------------------------------------------------------------------------------
# kube-apiserver: k8s.io/kubernetes, with every staging module (derived from kubernetes' own go.mod
# replace block) replaced by k8s.io/<module> KUBE_STAGING_VERSION. Newest that resolves here:
# v1.37.2's module zip is refused by the proxy; v1.37.1 (go 1.26.0) resolves and builds with go1.26.
# Known good before: v1.33.4 (with ETCD_VERSION=v3.5.21).
KUBE_VERSION="${KUBE_VERSION:-v1.37.1}"
KUBE_STAGING_VERSION="${KUBE_STAGING_VERSION:-v0.${KUBE_VERSION#v1.}}"
# etcd: go.etcd.io/etcd/server/v3 (the version kubernetes itself requires).
ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"
# Flux controllers (newer lines need Go 1.27; kustomize-controller v1.9.6 needs a refused module).
SOURCE_CONTROLLER_VERSION="${SOURCE_CONTROLLER_VERSION:-v1.9.6}"
KUSTOMIZE_CONTROLLER_VERSION="${KUSTOMIZE_CONTROLLER_VERSION:-v1.9.5}"
# source-controller's github.com/fluxcd/pkg/artifact v0.18.3 is refused by the proxy.
FLUX_PKG_ARTIFACT_VERSION="${FLUX_PKG_ARTIFACT_VERSION:-v0.18.1}"
# Flux's own go-digest pin (replace directives of dependencies are ignored, so repeat it).
GO_DIGEST_VERSION="${GO_DIGEST_VERSION:-v1.0.1-0.20220411205349-bde1400a84be}"
# -------------------------------------------------------------------------------------------------

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$ROOT/bin"
BUILD="$BIN/.build"

export GOTOOLCHAIN=local GOWORK=off CGO_ENABLED=0 GO111MODULE=on
GO="${GO:-go}"

mkdir -p "$BUILD" "$BIN/k8s" "$BIN/flux" "$BIN/crds"

rel() { echo "${1#"$ROOT"/}"; }

# run_logged LOG CMD...: append CMD's output to LOG; on failure show the log's tail and stop.
run_logged() {
	local log="$1"
	shift
	echo "+ $*" >>"$log"
	if ! "$@" >>"$log" 2>&1; then
		echo "FAILED: $*" >&2
		echo "---- last 60 lines of $(rel "$log") ----" >&2
		tail -n 60 "$log" >&2
		exit 1
	fi
}

# gomod_field MODULE@VERSION FIELD: download a module into the module cache and print one field
# (Dir, GoMod, ...) of `go mod download -json`. Runs in its own tiny module so that the
# project's go.mod is never read or touched.
gomod_field() {
	local dl="$BUILD/.download"
	mkdir -p "$dl"
	[[ -f "$dl/go.mod" ]] || printf 'module testbin/download\n\ngo 1.24\n' >"$dl/go.mod"
	local out
	if ! out="$(cd "$dl" && "$GO" mod download -json "$1" 2>&1)"; then
		echo "FAILED: go mod download $1" >&2
		echo "$out" >&2
		exit 1
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

# build NAME VERSION PINS PACKAGE ESTIMATE LDFLAGS GENFUNC
#   GENFUNC DIR writes go.mod + tools.go into DIR (the throwaway module).
build() {
	local name="$1" version="$2" pins="$3" pkg="$4" estimate="$5" ldflags="$6" gen="$7"
	local out="$BIN/$name-$version" stamp="$BIN/.$name-$version.pins"
	if [[ -x "$out" && -f "$stamp" && "$(cat "$stamp")" == "$pins" ]]; then
		echo "$name $version: up to date ($(rel "$out"))"
		return
	fi
	local dir="$BUILD/$name-$version"
	local log="$dir/build.log"
	rm -rf "$dir"
	mkdir -p "$dir"
	local start
	start="$(date +%s)"
	echo "building $name $version (cold build takes ~$estimate on 2 cores)..."
	echo "  started $(date '+%Y-%m-%d %H:%M:%S'); go output: $(rel "$log")"
	echo "# $pins" >"$log"
	"$gen" "$dir" "$log"
	cat >"$dir/tools.go" <<-EOF
		//go:build tools

		// Package tools only records the dependency on the binary's main package.
		package tools

		import _ "$pkg"
	EOF
	# -e: a refused module that is only needed by some dependency's tests must not stop us; the
	# build below fails loudly if something it really needs is missing.
	run_logged "$log" env -C "$dir" "$GO" mod tidy -e -v
	{ grep -E '(403 Forbidden|404 Not Found|410 Gone)' "$log" || true; } | sort -u | head -n 5 |
		sed 's/^/  note: go mod tidy -e skipped: /'
	run_logged "$log" env -C "$dir" "$GO" build -v -trimpath -buildvcs=false \
		-ldflags="-s -w $ldflags" -o "$out.tmp" "$pkg"
	mv -f "$out.tmp" "$out"
	echo "$pins" >"$stamp"
	echo "  built in $(($(date +%s) - start))s ($(rel "$out"))"
}

# ---- throwaway modules ------------------------------------------------------------------------
gen_kube_apiserver() {
	local dir="$1" gomod
	gomod="$(gomod_field "k8s.io/kubernetes@$KUBE_VERSION" GoMod)"
	local staging
	staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\/src\// {print $1}' "$gomod")"
	if [[ -z "$staging" ]]; then
		echo "FAILED: no staging replace directives found in $gomod" >&2
		exit 1
	fi
	{
		echo "module testbin/kube-apiserver"
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

gen_etcd() {
	local dir="$1" gomod
	gomod="$(gomod_field "go.etcd.io/etcd/server/v3@$ETCD_VERSION" GoMod)"
	{
		echo "module testbin/etcd"
		echo
		go_header "$gomod"
		echo
		echo "require go.etcd.io/etcd/server/v3 $ETCD_VERSION"
	} >"$dir/go.mod"
}

# gen_flux_controller DIR NAME VERSION EXTRA-LINES
gen_flux_controller() {
	local dir="$1" name="$2" version="$3" extra="$4" gomod
	gomod="$(gomod_field "github.com/fluxcd/$name@$version" GoMod)"
	{
		echo "module testbin/$name"
		echo
		go_header "$gomod"
		echo
		echo "require ("
		echo "	github.com/fluxcd/$name $version"
		# the controller's go.mod replaces its api submodule with ./api, which does not apply here
		echo "	github.com/fluxcd/$name/api $version"
		echo ")"
		echo
		echo "replace github.com/opencontainers/go-digest => github.com/opencontainers/go-digest $GO_DIGEST_VERSION"
		if [[ -n "$extra" ]]; then
			echo "$extra"
		fi
	} >"$dir/go.mod"
}

gen_source_controller() {
	gen_flux_controller "$1" source-controller "$SOURCE_CONTROLLER_VERSION" \
		"replace github.com/fluxcd/pkg/artifact => github.com/fluxcd/pkg/artifact $FLUX_PKG_ARTIFACT_VERSION"
}

gen_kustomize_controller() {
	gen_flux_controller "$1" kustomize-controller "$KUSTOMIZE_CONTROLLER_VERSION" ""
}

# ---- builds -----------------------------------------------------------------------------------
kube_minor="${KUBE_VERSION#v1.}"
kube_minor="${kube_minor%%.*}"
kube_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	kube_ldflags+=" -X $p.gitVersion=$KUBE_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$kube_minor"
	kube_ldflags+=" -X $p.gitTreeState=clean"
done

build kube-apiserver "$KUBE_VERSION" \
	"k8s.io/kubernetes@$KUBE_VERSION staging=$KUBE_STAGING_VERSION" \
	k8s.io/kubernetes/cmd/kube-apiserver "13 min" "$kube_ldflags" gen_kube_apiserver
build etcd "$ETCD_VERSION" \
	"go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
	go.etcd.io/etcd/server/v3 "1 min" "" gen_etcd
build source-controller "$SOURCE_CONTROLLER_VERSION" \
	"github.com/fluxcd/source-controller@$SOURCE_CONTROLLER_VERSION artifact=$FLUX_PKG_ARTIFACT_VERSION go-digest=$GO_DIGEST_VERSION" \
	github.com/fluxcd/source-controller "10 min" "" gen_source_controller
build kustomize-controller "$KUSTOMIZE_CONTROLLER_VERSION" \
	"github.com/fluxcd/kustomize-controller@$KUSTOMIZE_CONTROLLER_VERSION go-digest=$GO_DIGEST_VERSION" \
	github.com/fluxcd/kustomize-controller "5 min" "" gen_kustomize_controller

link "$BIN/k8s/kube-apiserver" "../kube-apiserver-$KUBE_VERSION"
link "$BIN/k8s/etcd" "../etcd-$ETCD_VERSION"
link "$BIN/flux/source-controller" "../source-controller-$SOURCE_CONTROLLER_VERSION"
link "$BIN/flux/kustomize-controller" "../kustomize-controller-$KUSTOMIZE_CONTROLLER_VERSION"

# ---- Flux CRDs --------------------------------------------------------------------------------
crds_pins="source-controller@$SOURCE_CONTROLLER_VERSION kustomize-controller@$KUSTOMIZE_CONTROLLER_VERSION"
crds_stamp="$BIN/crds/.pins"
if [[ -f "$crds_stamp" && "$(cat "$crds_stamp")" == "$crds_pins" ]] &&
	compgen -G "$BIN/crds/*.yaml" >/dev/null; then
	echo "flux CRDs ($crds_pins): up to date ($(rel "$BIN/crds"))"
else
	rm -f "$BIN/crds/"*.yaml "$crds_stamp"
	for mv_ in "source-controller@$SOURCE_CONTROLLER_VERSION" "kustomize-controller@$KUSTOMIZE_CONTROLLER_VERSION"; do
		moddir="$(gomod_field "github.com/fluxcd/$mv_" Dir)"
		if ! compgen -G "$moddir/config/crd/bases/*.yaml" >/dev/null; then
			echo "FAILED: no CRDs in $moddir/config/crd/bases" >&2
			exit 1
		fi
		# files in the module cache are read-only; give the copies normal permissions
		install -m 0644 "$moddir"/config/crd/bases/*.yaml "$BIN/crds/"
	done
	echo "$crds_pins" >"$crds_stamp"
	echo "flux CRDs ($crds_pins): copied to $(rel "$BIN/crds"):"
	(cd "$BIN/crds" && ls -1 -- *.yaml | sed 's/^/  /')
fi

# ---- env file ---------------------------------------------------------------------------------
env_file="$BIN/testbin.env"
cat >"$env_file.tmp" <<EOF
KUBEBUILDER_ASSETS=$BIN/k8s
TEST_ASSET_KUBE_APISERVER=$BIN/k8s/kube-apiserver
TEST_ASSET_ETCD=$BIN/k8s/etcd
SOURCE_CONTROLLER_BIN=$BIN/flux/source-controller
KUSTOMIZE_CONTROLLER_BIN=$BIN/flux/kustomize-controller
FLUX_CRDS_DIR=$BIN/crds
EOF
if cmp -s "$env_file.tmp" "$env_file"; then
	rm -f "$env_file.tmp"
else
	mv -f "$env_file.tmp" "$env_file"
	echo "wrote $(rel "$env_file")"
fi

echo "pinned versions:"
echo "  kube-apiserver       $KUBE_VERSION (k8s.io/kubernetes $KUBE_VERSION, staging $KUBE_STAGING_VERSION)"
echo "  etcd                 $ETCD_VERSION (go.etcd.io/etcd/server/v3)"
echo "  source-controller    $SOURCE_CONTROLLER_VERSION (pkg/artifact $FLUX_PKG_ARTIFACT_VERSION)"
echo "  kustomize-controller $KUSTOMIZE_CONTROLLER_VERSION"
echo "  go                   $("$GO" env GOVERSION)"
