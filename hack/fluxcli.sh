#!/usr/bin/env bash
# Builds the flux CLI (github.com/fluxcd/flux2/v2 cmd/flux) from the Go module proxy into ./bin,
# for the tests of the `flux kcl` plugin. Nothing prebuilt is downloaded: the binary comes from a
# throwaway Go module under bin/.build/flux-cli-<version>/ (hack/lib/build.sh), keyed by its pins,
# and a build that failed is not tried again with the same pins unless FLUXCLI_RETRY=1.
#
# cmd/flux embeds cmd/flux/manifests/*.yaml, which are not in the module zip: flux2's
# manifests/scripts/bundle.sh generates them with kustomize from manifests/, whose bases download
# each controller's release assets. Here test/cmd/fluxbundle builds those assets from config/ of
# each controller's Go module instead (as test/nodeinstall does for the node suite), with the
# kustomize API this repository's go.mod pins. The embedded manifests are only used by `flux install` and
# `flux bootstrap` of the same version.
#
# Outputs:
#   bin/flux-cli-<version>/flux
#   bin/flux-cli -> flux-cli-<version>   (a directory: PATH=$PWD/bin/flux-cli:$PATH gives `flux`;
#                                         bin/flux is testbin's directory of Flux controllers)
#
# All pins can be overridden from the environment, e.g. FLUX_CLI_VERSION=v2.9.4 hack/fluxcli.sh
set -euo pipefail

# ---- pins -------------------------------------------------------------------------------------
FLUX_CLI_VERSION="${FLUX_CLI_VERSION:-v2.9.5}"
# The controller modules whose config/ makes the embedded manifests: the versions flux2's bases
# download, or, where the proxy refuses that module version (403), the nearest one it serves
# (v2.9.5 wants image-automation v1.2.5, image-reflector v1.2.5, notification v1.9.4, source-watcher
# v2.2.4: refused). The embedded Deployments then name those versions' images.
FLUXCLI_CONTROLLERS="${FLUXCLI_CONTROLLERS:-source-controller@v1.9.5 kustomize-controller@v1.9.5
	helm-controller@v1.6.4 notification-controller@v1.9.3 image-reflector-controller@v1.2.4
	image-automation-controller@v1.2.4 source-watcher/v2@v2.2.2}"
# -------------------------------------------------------------------------------------------------

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
RETRY_VAR=FLUXCLI_RETRY

# gen_flux_cli DIR LOG: DIR/flux2, a writable copy of the flux2 module with the generated
# manifests, and a go.mod that builds its cmd/flux (flux2's own replace directives repeated, since
# those of a dependency are ignored).
gen_flux_cli() {
	local dir="$1" log="$2" src gomod
	src="$(gomod_field "github.com/fluxcd/flux2/v2@$FLUX_CLI_VERSION" Dir)" || return 1
	gomod="$(gomod_field "github.com/fluxcd/flux2/v2@$FLUX_CLI_VERSION" GoMod)" || return 1
	cp -r "$src" "$dir/flux2"
	chmod -R u+w "$dir/flux2"
	local mods=() c name moddir
	for c in $FLUXCLI_CONTROLLERS; do
		moddir="$(gomod_field "github.com/fluxcd/$c" Dir)" || return 1
		name="${c%@*}"
		mods+=("${name%/v[0-9]*}=$moddir")
	done
	echo "  generating cmd/flux/manifests from the controllers' config/ (test/cmd/fluxbundle)"
	run_logged "$log" "fluxbundle" env -C "$ROOT" GOTOOLCHAIN=local "$GO" run ./test/cmd/fluxbundle \
		--manifests "$dir/flux2/manifests" --out "$dir/flux2/cmd/flux/manifests" "${mods[@]}" || return 1
	{
		echo "module fluxcli/flux"
		echo
		go_header "$gomod"
		echo
		echo "require github.com/fluxcd/flux2/v2 $FLUX_CLI_VERSION"
		echo
		echo "replace github.com/fluxcd/flux2/v2 => ./flux2"
		awk '/^replace [^(]/ && $0 !~ /=> *\.\.?\// {print}' "$gomod"
	} >"$dir/go.mod"
}

pins="github.com/fluxcd/flux2/v2@$FLUX_CLI_VERSION manifests:"
for c in $FLUXCLI_CONTROLLERS; do
	pins+=" $c"
done
pins+=" fluxbundle=$(cat "$ROOT/test/cmd/fluxbundle/main.go" "$ROOT/test/fluxassets/fluxassets.go" | git hash-object --stdin | cut -c1-12)"

# the flux CLI's own release stamps main.VERSION without the v (flux version prints "flux: v2.9.5")
BUILD_OUT_DIR=1 build flux-cli "$FLUX_CLI_VERSION" "$pins" github.com/fluxcd/flux2/v2/cmd/flux \
	"4 min" "-X main.VERSION=${FLUX_CLI_VERSION#v}" gen_flux_cli || exit 1
link "$BIN/flux-cli" "flux-cli-$FLUX_CLI_VERSION"
"$BIN/flux-cli/flux" version --client >/dev/null || {
	echo "FAILED: $(rel "$BIN/flux-cli/flux") version --client" >&2
	exit 1
}
echo "flux CLI: $(rel "$BIN/flux-cli/flux") ($("$BIN/flux-cli/flux" version --client 2>&1 | head -n1))"
