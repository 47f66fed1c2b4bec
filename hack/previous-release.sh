#!/usr/bin/env bash
# Builds the previous release of this controller, for the node suite's upgrade by Flux: its
# binary from its own sources (git archive of PREVIOUS_RELEASE), its image with today's image
# builder (test/cmd/image --bin), and a copy of its config/, which a platform repository vendors.
#
# Output, keyed by the commit: bin/previous-<sha12>/{bin/kcl-artifact-controller[,kcl-worker,flux-kcl],config/,images/}
# and bin/previous.env (PREVIOUS_RELEASE_DIR, PREVIOUS_RELEASE_IMAGE). Rebuilt only when the commit
# changes. The KCL engine (bin/libkcl.so, bin/libnapistub.so) is today's: hack/libkcl.sh pins the same version there.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
: "${PREVIOUS_RELEASE:?set PREVIOUS_RELEASE to the commit of the previous release}"
sha="$(git rev-parse --verify "${PREVIOUS_RELEASE}^{commit}")"
short="${sha:0:12}"
out="bin/previous-$short"
tag="prev-$short"
image="ghcr.io/kcl-flux/kcl-artifact-controller:$tag"

if [[ -f "$out/.done" ]]; then
	echo "previous release $short: up to date ($out)"
else
	echo "previous release $short: building its binary and image into $out"
	rm -rf "$out"
	mkdir -p "$out/src" "$out/bin"
	git archive "$sha" | tar -x -C "$out/src"
	cp -r "$out/src/config" "$out/config"
	# build_cmd NAME: that release's ./cmd/NAME, with its version, into $out/bin/NAME
	build_cmd() {
		(cd "$out/src" && GOWORK=off CGO_ENABLED=0 go build -trimpath \
			-ldflags "-X github.com/kcl-flux/kcl-artifact-controller/internal/version.Version=$tag" \
			-o "$ROOT/$out/bin/$1" "./cmd/$1")
	}
	build_cmd kcl-artifact-controller
	cp bin/libkcl.so bin/libnapistub.so "$out/bin/"
	# The image as that release shipped it: with its flux-kcl plugin if it had one.
	plugin=(--without-plugin)
	if [[ -d "$out/src/cmd/flux-kcl" ]]; then
		build_cmd flux-kcl
		plugin=()
	fi
	# With its kcl-worker if it had one; before it, the controller runs its own binary as the worker.
	worker=(--without-worker)
	if [[ -d "$out/src/cmd/kcl-worker" ]]; then
		build_cmd kcl-worker
		worker=()
	fi
	go run ./test/cmd/image --bin "$out/bin" --version "$tag" --out "$out/images" "${plugin[@]}" "${worker[@]}" controller
	rm -rf "$out/src"
	touch "$out/.done"
fi
printf 'PREVIOUS_RELEASE_DIR=%s\nPREVIOUS_RELEASE_IMAGE=%s\n' "$ROOT/$out" "$image" >bin/previous.env.tmp
mv bin/previous.env.tmp bin/previous.env
