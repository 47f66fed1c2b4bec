#!/usr/bin/env bash
# Builds image-reflector-controller alone (the step of hack/testbin.sh that builds it, without
# touching the other binaries), for a bin/ that testbin.sh filled before this controller was
# part of it. From the Go module proxy, into ./bin, keyed by its pins (hack/lib/flux.sh):
#   bin/image-reflector-controller-<version>, bin/flux/image-reflector-controller -> it
# and brings what testbin.sh would have written up to date:
#   every bin/crds-<line>/ and bin/crds/ that exists: the ImageRepository and ImagePolicy CRDs,
#     and the pin in its .pins (so testbin.sh finds them up to date)
#   every bin/testbin.env and bin/testbin-flux<line>.env: IMAGE_REFLECTOR_CONTROLLER_BIN
# A build that failed is not tried again with the same pins unless FLUX_RETRY=1.
set -euo pipefail

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
# shellcheck source=hack/lib/flux.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/flux.sh"

status=0
build_image_reflector || status=1

# add_crds DIR: DIR's CRDs and .pins as copy_crds of testbin.sh makes them now (the pins of an
# older version of this controller replaced).
add_crds() {
	local dir="$1" pin pins
	pin="$(image_reflector_crds_pin)"
	pins="$(tr ' ' '\n' <"$dir/.pins" | grep -v "^$IRC@" | tr '\n' ' ')"
	pins="${pins% } $pin"
	copy_image_reflector_crds "$dir" || return 1
	if [[ "$(cat "$dir/.pins")" != "$pins" ]]; then
		echo "$pins" >"$dir/.pins"
		echo "$(rel "$dir"): $IRC's CRDs added ($pins)"
	fi
}

shopt -s nullglob
for d in "$BIN"/crds-* "$BIN/crds"; do
	[[ -f "$d/.pins" ]] || continue
	add_crds "$d" || status=1
done
for f in "$BIN/testbin.env" "$BIN"/testbin-flux*.env; do
	[[ -f "$f" ]] || continue
	cp "$f" "$f.tmp"
	image_reflector_env "$f.tmp"
	replace_if_changed "$f.tmp" "$f"
done
exit "$status"
