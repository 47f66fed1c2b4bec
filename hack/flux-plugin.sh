#!/usr/bin/env bash
# Installs a built flux-kcl where flux v2.9+ finds plugins: $FLUXCD_PLUGINS when set and not
# empty, else ~/.fluxcd/plugins (flux's own rule; flux itself never creates $FLUXCD_PLUGINS).
#
#   bash hack/flux-plugin.sh bin/flux-kcl        (make flux-plugin)
set -euo pipefail
src=${1:?usage: hack/flux-plugin.sh <flux-kcl binary>}
dir=${FLUXCD_PLUGINS:-$HOME/.fluxcd/plugins}
mkdir -p "$dir"
# A temporary file renamed into place: a flux-kcl running now keeps its file, and no flux run
# finds a half-written one.
tmp=$(mktemp "$dir/.flux-kcl.XXXXXX")
trap 'rm -f "$tmp"' EXIT
cp "$src" "$tmp"
chmod 0755 "$tmp"
mv -f "$tmp" "$dir/flux-kcl"
trap - EXIT
# `flux plugin install` leaves a receipt naming the catalog version it installed. It would now
# describe another binary, and `flux plugin update` would replace this build with the catalog's;
# without it, flux lists this build as "manual" and leaves it alone.
if [ -f "$dir/flux-kcl.yaml" ]; then
	rm -f "$dir/flux-kcl.yaml"
	echo "removed $dir/flux-kcl.yaml, flux plugin install's receipt of the flux-kcl this build replaces"
fi
echo "installed $dir/flux-kcl ($("$dir/flux-kcl" version --client | head -n1)): run it as 'flux kcl'"
