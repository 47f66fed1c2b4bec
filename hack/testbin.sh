#!/usr/bin/env bash
# Builds the pinned binaries the integration tests run against (kube-apiserver, etcd,
# source-controller + kustomize-controller of one or more Flux lines, and image-reflector-controller)
# from Go modules into ./bin, and copies each line's Flux CRDs out of the module cache. Nothing
# prebuilt is downloaded: each binary comes from a throwaway Go module under
# bin/.build/<name>-<version>/ (hack/lib/build.sh).
#
# Every binary is keyed by its pins: bin/<name>-<version> plus bin/.<name>-<version>.pins. It is
# rebuilt only when a pin changes; otherwise this script prints "up to date" and does nothing.
# A build that failed is remembered in bin/.<name>-<version>.failed (same pins) and not tried
# again until a pin changes or FLUX_RETRY=1 is set.
#
# Flux lines: FLUX_LINES (default "2.9 2.10") chooses the lines to build; FLUX_LINE (default 2.9,
# the newest line this proxy can build) the default line. A line built only because it is in the
# default FLUX_LINES prints one line of outcome; its build output goes to bin/.build/flux-<line>.log. When FLUX_LINE is not set and the default line could not be built, the newest
# line that could be built is the default and a warning says so.
#
# Outputs:
#   bin/k8s/{kube-apiserver,etcd}                         -> usable as KUBEBUILDER_ASSETS
#   bin/flux-<line>/{source-controller,kustomize-controller}
#   bin/image-reflector-controller-<version>              -> bin/flux/image-reflector-controller
#   bin/crds-<line>/*.yaml                                Flux CRDs of the line (config/crd/bases),
#                                                         and image-reflector-controller's
#   bin/testbin-flux<line>.env                            absolute paths, KEY=VALUE lines
#   bin/flux/, bin/crds/, bin/testbin.env                 the default line (bin/flux/* symlinks,
#                                                         bin/crds a copy of bin/crds-<line>)
#
# All pins can be overridden from the environment, e.g. KUBE_VERSION=v1.33.4 hack/testbin.sh
# shellcheck disable=SC2317 # the gen_* functions are called through build's GENFUNC argument
set -euo pipefail

# ---- pins -------------------------------------------------------------------------------------
# kube-apiserver: KUBE_VERSION and KUBE_STAGING_VERSION, in hack/lib/build.sh (nodebin.sh builds the
# node binaries of the same Kubernetes).
# etcd: go.etcd.io/etcd/server/v3 (the version kubernetes itself requires).
ETCD_VERSION="${ETCD_VERSION:-v3.7.0}"

FLUX_LINES_FROM_ENV="${FLUX_LINES:+1}"
FLUX_LINES="${FLUX_LINES:-2.9 2.10}"
DEFAULT_FLUX_LINE=2.9
# TESTBIN_DEFAULT_LINE_ONLY=1 (make demo): only the default line, whatever FLUX_LINES says by
# default; trying an optional line costs a fresh clone minutes (95 s here for 2.10, which the Go
# module proxy refuses) for a line the demo does not run
if [[ -n "${TESTBIN_DEFAULT_LINE_ONLY:-}" && -z "$FLUX_LINES_FROM_ENV" ]]; then
	FLUX_LINES="${FLUX_LINE:-$DEFAULT_FLUX_LINE}"
fi

# Per Flux line L (variables FLUX<L without dots>_*):
#   _SOURCE_CONTROLLER_VERSION, _KUSTOMIZE_CONTROLLER_VERSION  github.com/fluxcd/<name> versions
#   _GOTOOLCHAIN                   "local" (the installed go) or e.g. go1.27.4 (from the proxy)
#   _SOURCE_CONTROLLER_REPLACES, _KUSTOMIZE_CONTROLLER_REPLACES
#       "module@version ..." pins for modules whose required version the proxy refuses (403/404/
#       410): the nearest version it serves. The controller's own non-local replace directives are
#       copied from its go.mod as well (those of dependencies are ignored by Go).
#
# Flux 2.9. source-controller needs github.com/fluxcd/pkg/artifact v0.18.3, refused.
FLUX29_SOURCE_CONTROLLER_VERSION="${FLUX29_SOURCE_CONTROLLER_VERSION:-v1.9.6}"
FLUX29_KUSTOMIZE_CONTROLLER_VERSION="${FLUX29_KUSTOMIZE_CONTROLLER_VERSION:-v1.9.5}"
FLUX29_GOTOOLCHAIN="${FLUX29_GOTOOLCHAIN:-local}"
FLUX29_SOURCE_CONTROLLER_REPLACES="${FLUX29_SOURCE_CONTROLLER_REPLACES-github.com/fluxcd/pkg/artifact@v0.18.1}"
FLUX29_KUSTOMIZE_CONTROLLER_REPLACES="${FLUX29_KUSTOMIZE_CONTROLLER_REPLACES-}"
#
# Flux 2.10 (go 1.27.0). NOT buildable on this proxy yet: both controllers import
# github.com/fluxcd/pkg/spiffe and github.com/fluxcd/pkg/apis/crypto (also through pkg/auth), and
# every version of them the proxy knows has its zip refused (spiffe v0.2.0 v0.3.0 v0.4.0, apis/crypto
# v0.5.0 v0.6.0 v0.7.0). The pins below are the nearest served versions of the other refused
# modules (required -> pinned); everything else of both graphs compiles with them.
#   pkg/artifact v0.27.1 -> v0.20.0 (v0.27.0, v0.19.0, v0.18.3 refused; API not checked)
#   pkg/auth v0.66.0 -> v0.66.1, pkg/http/transport v0.9.0 -> v0.8.0, pkg/masktoken v0.10.0 ->
#   v0.9.0, pkg/lockedfile v0.9.0 -> v0.8.0, pkg/http/fetch v0.30.1 -> v0.25.0 (v0.30.0 refused),
#   docker/cli v29.9.2 -> v29.9.3, cosign/v3 v3.1.4 -> v3.1.3, cloud.google.com/go/kms v1.36.0 ->
#   v1.36.1, k8schain and go-digest/blake3 (2026-10 pseudo-versions) -> the ones of the 2.9 builds,
#   docker-credential-acr v1.0.3 -> v1.0.2, docker-credential-acr-helper v0.4.1 -> v0.4.0 (v0.4.1
#   needs its nested module pkg/acr v0.2.2, refused).
FLUX210_SOURCE_CONTROLLER_VERSION="${FLUX210_SOURCE_CONTROLLER_VERSION:-v1.10.1}"
FLUX210_KUSTOMIZE_CONTROLLER_VERSION="${FLUX210_KUSTOMIZE_CONTROLLER_VERSION:-v1.10.1}"
FLUX210_GOTOOLCHAIN="${FLUX210_GOTOOLCHAIN:-go1.27.4}"
flux210_common="github.com/fluxcd/pkg/auth@v0.66.1 github.com/fluxcd/pkg/masktoken@v0.9.0"
flux210_common+=" github.com/opencontainers/go-digest/blake3@v0.0.0-20250813155314-89707e38ad1a"
FLUX210_SOURCE_CONTROLLER_REPLACES="${FLUX210_SOURCE_CONTROLLER_REPLACES-$flux210_common
	github.com/fluxcd/pkg/artifact@v0.20.0 github.com/fluxcd/pkg/http/transport@v0.8.0
	github.com/fluxcd/pkg/lockedfile@v0.8.0 github.com/docker/cli@v29.9.3+incompatible
	github.com/sigstore/cosign/v3@v3.1.3
	github.com/google/go-containerregistry/pkg/authn/k8schain@v0.0.0-20260602205845-4b7672c7705a
	github.com/gaganhr94/docker-credential-acr@v1.0.2
	github.com/mozillazg/docker-credential-acr-helper@v0.4.0}"
FLUX210_KUSTOMIZE_CONTROLLER_REPLACES="${FLUX210_KUSTOMIZE_CONTROLLER_REPLACES-$flux210_common
	github.com/fluxcd/pkg/http/fetch@v0.25.0 cloud.google.com/go/kms@v1.36.1}"

# go-digest and image-reflector-controller: GO_DIGEST_VERSION and IMAGE_REFLECTOR_CONTROLLER_*, in
# hack/lib/flux.sh (hack/imagereflector.sh builds image-reflector-controller alone).
# -------------------------------------------------------------------------------------------------

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
# shellcheck source=hack/lib/flux.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/flux.sh"

mkdir -p "$BUILD" "$BIN/k8s" "$BIN/flux" "$BIN/crds"

# line_var LINE SUFFIX: the value of FLUX<LINE without dots>_SUFFIX ("" if unset).
line_var() {
	local v="FLUX${1//./}_$2"
	echo "${!v:-}"
}

# write_env FILE FLUXDIR CRDSDIR: the env file of one line.
write_env() {
	local file="$1"
	cat >"$file.tmp" <<-EOF
		KUBEBUILDER_ASSETS=$BIN/k8s
		TEST_ASSET_KUBE_APISERVER=$BIN/k8s/kube-apiserver
		TEST_ASSET_ETCD=$BIN/k8s/etcd
		SOURCE_CONTROLLER_BIN=$2/source-controller
		KUSTOMIZE_CONTROLLER_BIN=$2/kustomize-controller
		FLUX_CRDS_DIR=$3
	EOF
	image_reflector_env "$file.tmp"
	replace_if_changed "$file.tmp" "$file"
}

# copy_crds LINE SC-VERSION KC-VERSION TOOLCHAIN: bin/crds-<line>/*.yaml from the modules.
copy_crds() {
	local line="$1" dir="$BIN/crds-$1"
	local pins="source-controller@$2 kustomize-controller@$3 $(image_reflector_crds_pin)"
	if [[ -f "$dir/.pins" && "$(cat "$dir/.pins")" == "$pins" ]] && compgen -G "$dir/*.yaml" >/dev/null; then
		echo "flux $line CRDs ($pins): up to date ($(rel "$dir"))"
		return 0
	fi
	mkdir -p "$dir"
	rm -f "$dir/"*.yaml "$dir/.pins"
	local mv_ moddir
	for mv_ in "source-controller@$2" "kustomize-controller@$3"; do
		moddir="$(gomod_field "github.com/fluxcd/$mv_" Dir "$4")" || return 1
		if ! compgen -G "$moddir/config/crd/bases/*.yaml" >/dev/null; then
			echo "FAILED: no CRDs in $moddir/config/crd/bases" >&2
			return 1
		fi
		# files in the module cache are read-only; give the copies normal permissions
		install -m 0644 "$moddir"/config/crd/bases/*.yaml "$dir/"
	done
	copy_image_reflector_crds "$dir" || return 1
	echo "$pins" >"$dir/.pins"
	echo "flux $line CRDs ($pins): copied to $(rel "$dir"):"
	(cd "$dir" && printf '  %s\n' *.yaml)
}

# build_line LINE: both controllers, the CRDs, bin/flux-<line>/ and bin/testbin-flux<line>.env.
build_line() {
	local line="$1"
	local sc kc tc ok=0
	sc="$(line_var "$line" SOURCE_CONTROLLER_VERSION)"
	kc="$(line_var "$line" KUSTOMIZE_CONTROLLER_VERSION)"
	tc="$(line_var "$line" GOTOOLCHAIN)"
	tc="${tc:-local}"
	if [[ -z "$sc" || -z "$kc" ]]; then
		echo "FAILED: unknown Flux line $line: set FLUX${line//./}_SOURCE_CONTROLLER_VERSION and" \
			"FLUX${line//./}_KUSTOMIZE_CONTROLLER_VERSION" >&2
		return 1
	fi
	echo "---- flux $line: source-controller $sc, kustomize-controller $kc, go $tc"
	build_line_controllers "$line" || ok=1
	# the CRDs come from the module zips, so they are there even when a binary cannot be built
	copy_crds "$line" "$sc" "$kc" "$tc" || ok=1
	if ((ok != 0)); then
		# no env file for a line whose binaries are not at its pins
		rm -f "$BIN/testbin-flux$line.env"
		return 1
	fi
	mkdir -p "$BIN/flux-$line"
	link "$BIN/flux-$line/source-controller" "../source-controller-$sc"
	link "$BIN/flux-$line/kustomize-controller" "../kustomize-controller-$kc"
	write_env "$BIN/testbin-flux$line.env" "$BIN/flux-$line" "$BIN/crds-$line"
}

# build_line_controllers LINE: the line's source-controller and kustomize-controller. The
# estimates are the cold builds measured here (issue 48): 351 s and 264 s.
build_line_controllers() {
	local line="$1" tc ok=0
	tc="$(line_var "$line" GOTOOLCHAIN)"
	build_flux_controller source-controller "$(line_var "$line" SOURCE_CONTROLLER_VERSION)" \
		"$(line_var "$line" SOURCE_CONTROLLER_REPLACES)" "${tc:-local}" "6 min" || ok=1
	build_flux_controller kustomize-controller "$(line_var "$line" KUSTOMIZE_CONTROLLER_VERSION)" \
		"$(line_var "$line" KUSTOMIZE_CONTROLLER_REPLACES)" "${tc:-local}" "5 min" || ok=1
	return $ok
}

# build_control_plane: kube-apiserver and etcd (587 s and 63 s cold here).
build_control_plane() {
	build kube-apiserver "$KUBE_VERSION" \
		"k8s.io/kubernetes@$KUBE_VERSION staging=$KUBE_STAGING_VERSION" \
		k8s.io/kubernetes/cmd/kube-apiserver "10 min" "$(kube_version_ldflags)" \
		"gen_kubernetes testbin/kube-apiserver" || return 1
	build etcd "$ETCD_VERSION" \
		"go.etcd.io/etcd/server/v3@$ETCD_VERSION" \
		go.etcd.io/etcd/server/v3 "1 min" "" "gen_require testbin/etcd go.etcd.io/etcd/server/v3 $ETCD_VERSION"
}

lines=()
for l in $FLUX_LINES; do
	lines+=("$l")
done
default_line="${FLUX_LINE:-$DEFAULT_FLUX_LINE}"
if [[ -n "${FLUX_LINE:-}" && " ${lines[*]} " != *" $FLUX_LINE "* ]]; then
	lines+=("$FLUX_LINE")
fi
for l in "${lines[@]}"; do
	if [[ ! "$l" =~ ^[0-9]+\.[0-9]+$ ]]; then
		echo "FAILED: Flux line \"$l\" (FLUX_LINES/FLUX_LINE) is not of the form 2.10" >&2
		exit 1
	fi
done

# required LINE: whether LINE is the default line or was asked for by name (FLUX_LINES). Its build
# output is shown in full; the output of any other line goes to a log, and its outcome is one line
# (a fresh clone should not print a page of build errors for a line it does not need).
required() { [[ -n "$FLUX_LINES_FROM_ENV" || "$default_line" == "$1" ]]; }

# ---- builds -----------------------------------------------------------------------------------
# The plan first (nothing is built): the estimates of what will be, for the time left in total.
# An optional line is left out of it: here it fails in its first minute, and says so in one line.
plan_start
build_control_plane
build_image_reflector
for l in "${lines[@]}"; do
	if required "$l"; then build_line_controllers "$l"; fi
done
plan_end

build_control_plane || exit 1
link "$BIN/k8s/kube-apiserver" "../kube-apiserver-$KUBE_VERSION"
link "$BIN/k8s/etcd" "../etcd-$ETCD_VERSION"
# not fatal: without it only the tests that start image-reflector-controller cannot run (fluxenv
# says so), and write_env leaves IMAGE_REFLECTOR_CONTROLLER_BIN out
irc_ok=1
build_image_reflector || irc_ok=0

# build_optional_line LINE: build_line with its output in a log; prints one line.
build_optional_line() {
	local line="$1" log="$BUILD/flux-$1.log" start rc=0 why
	mkdir -p "$BUILD"
	start="$(date +%s)"
	printf 'flux %s (optional line; output in %s): ' "$line" "$(rel "$log")"
	build_line "$line" >"$log" 2>&1 || rc=$?
	if ((rc == 0)); then
		echo "ok ($(($(date +%s) - start))s)"
		return 0
	fi
	if grep -q 'failed before with the same pins' "$log"; then
		why="failed before with the same pins (FLUX_RETRY=1 to retry)"
	elif grep -q 'refused:' "$log"; then
		why="the Go module proxy refuses $(grep -c 'refused:' "$log") of the modules it needs"
	else
		why="build failed"
	fi
	echo "NOT built: $why; FLUX_LINES=$line shows the errors"
	return 1
}

ok_lines=() failed_lines=()
for l in "${lines[@]}"; do
	if ! required "$l"; then
		if build_optional_line "$l"; then ok_lines+=("$l"); else failed_lines+=("$l"); fi
	elif build_line "$l"; then
		ok_lines+=("$l")
	else
		failed_lines+=("$l")
		echo "flux $l: NOT built (see above)" >&2
	fi
done

# ---- the default line: bin/flux, bin/crds, bin/testbin.env -----------------------------------
status=0
if [[ " ${ok_lines[*]} " != *" $default_line "* ]]; then
	why="could not be built"
	[[ " ${lines[*]} " == *" $default_line "* ]] || why="is not in FLUX_LINES"
	if [[ -n "${FLUX_LINE:-}" || ${#ok_lines[@]} -eq 0 ]]; then
		echo "FAILED: default flux line $default_line $why; bin/flux, bin/crds and bin/testbin.env" \
			"left as they were" >&2
		default_line=""
		status=1
	else
		# an optional default line that failed has said so in its one line already
		[[ " ${failed_lines[*]} " == *" $default_line "* ]] ||
			echo "WARNING: default flux line $default_line $why; the default line is ${ok_lines[-1]}" \
				"instead (set FLUX_LINE to insist)" >&2
		default_line="${ok_lines[-1]}"
	fi
fi
if [[ -n "$default_line" ]]; then
	link "$BIN/flux/source-controller" "$(readlink "$BIN/flux-$default_line/source-controller")"
	link "$BIN/flux/kustomize-controller" "$(readlink "$BIN/flux-$default_line/kustomize-controller")"
	# bin/crds is a copy (other scripts and running tests use it as a directory)
	src_crds="$BIN/crds-$default_line"
	if [[ -f "$BIN/crds/.pins" && "$(cat "$BIN/crds/.pins")" == "$(cat "$src_crds/.pins")" ]] &&
		diff -rq "$src_crds" "$BIN/crds" >/dev/null; then
		:
	else
		rm -f "$BIN/crds/"*.yaml "$BIN/crds/.pins"
		install -m 0644 "$src_crds"/*.yaml "$BIN/crds/"
		cp "$src_crds/.pins" "$BIN/crds/.pins"
		echo "bin/crds: now the CRDs of flux $default_line ($(cat "$src_crds/.pins"))"
	fi
	write_env "$BIN/testbin.env" "$BIN/flux" "$BIN/crds"
fi
# bin/testbin-other-lines: the built lines besides the default, which `make test` runs the
# suites with real Flux controllers on too
others=()
for l in "${ok_lines[@]}"; do
	[[ "$l" == "$default_line" ]] || others+=("$l")
done
printf '%s\n' "${others[@]}" | sed '/^$/d' >"$BIN/testbin-other-lines"
# a line explicitly asked for (FLUX_LINES set) that failed is an error
if [[ -n "$FLUX_LINES_FROM_ENV" && ${#failed_lines[@]} -gt 0 ]]; then
	status=1
fi

# ---- summary ----------------------------------------------------------------------------------
echo "pinned versions:"
echo "  kube-apiserver       $KUBE_VERSION (k8s.io/kubernetes $KUBE_VERSION, staging $KUBE_STAGING_VERSION)"
echo "  etcd                 $ETCD_VERSION (go.etcd.io/etcd/server/v3), go $("$GO" env GOVERSION)"
if ((irc_ok)); then
	echo "  $IRC $IMAGE_REFLECTOR_CONTROLLER_VERSION, go $IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN (every line)"
	for r in $IMAGE_REFLECTOR_CONTROLLER_REPLACES; do
		echo "    replace $r"
	done
else
	echo "  $IRC $IMAGE_REFLECTOR_CONTROLLER_VERSION: NOT BUILT (its CRDs are in bin/crds-<line> all the same)"
fi
for l in "${lines[@]}"; do
	tag=""
	[[ "$l" == "$default_line" ]] && tag=" (default: bin/flux, bin/crds, bin/testbin.env)"
	if [[ " ${failed_lines[*]} " == *" $l "* ]]; then
		echo "  flux $l: NOT BUILT"
		continue
	fi
	tc="$(line_var "$l" GOTOOLCHAIN)"
	echo "  flux $l$tag, go ${tc:-local}:"
	echo "    source-controller    $(line_var "$l" SOURCE_CONTROLLER_VERSION)"
	for r in $(line_var "$l" SOURCE_CONTROLLER_REPLACES); do
		echo "      replace $r"
	done
	echo "    kustomize-controller $(line_var "$l" KUSTOMIZE_CONTROLLER_VERSION)"
	for r in $(line_var "$l" KUSTOMIZE_CONTROLLER_REPLACES); do
		echo "      replace $r"
	done
done
exit "$status"
