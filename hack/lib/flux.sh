# shellcheck shell=bash
# Shared by hack/testbin.sh and hack/imagereflector.sh (source it after hack/lib/build.sh; it
# defines functions and settings only): building a Flux controller from its Go module, and the
# pinned image-reflector-controller (binary, CRDs, env line).

# ---- pins shared by both scripts --------------------------------------------------------------
# Flux's own go-digest pin (replace directives of dependencies are ignored, so repeat it).
GO_DIGEST_VERSION="${GO_DIGEST_VERSION:-v1.0.1-0.20220411205349-bde1400a84be}"
#
# image-reflector-controller (github.com/fluxcd/image-reflector-controller and its api module, go
# 1.26.0: the local go). Not tied to a Flux line: one version serves every line; its CRDs
# (ImageRepository, ImagePolicy) are added to each bin/crds-<line>, so FLUX_CRDS_DIR has them.
#   _REPLACES: "module@version ..." for modules whose required version the proxy refuses, pinned to
#   the nearest version it serves: v1.2.4 needs github.com/fluxcd/pkg/artifact v0.18.2 (403), so
#   v0.18.1, as Flux 2.9's source-controller.
IMAGE_REFLECTOR_CONTROLLER_VERSION="${IMAGE_REFLECTOR_CONTROLLER_VERSION:-v1.2.4}"
IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN="${IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN:-local}"
IMAGE_REFLECTOR_CONTROLLER_REPLACES="${IMAGE_REFLECTOR_CONTROLLER_REPLACES-github.com/fluxcd/pkg/artifact@v0.18.1}"
# -------------------------------------------------------------------------------------------------

# upstream_replaces GOMOD SKIP...: the replace directives of a go.mod as "replace ..." lines, but
# not those to local paths nor those of the modules in SKIP.
upstream_replaces() {
	local gomod="$1"
	shift
	awk -v skip=" $* " '
		{ sub(/\/\/.*/, "") }
		/^replace[ \t]*\(/ { b = 1; next }
		b && /^[ \t]*\)/ { b = 0; next }
		/^replace[ \t]/ { sub(/^replace[ \t]+/, ""); r = 1 }
		b || r {
			r = 0
			n = split($0, f, /[ \t]+/)
			lhs = ""
			for (i = 1; i <= n; i++) if (f[i] != "") { lhs = f[i]; break }
			arrow = 0
			for (i = 1; i <= n; i++) if (f[i] == "=>") { arrow = i; break }
			if (!arrow || lhs == "") next
			target = f[arrow + 1]
			if (target ~ /^\.\.?\// || index(skip, " " lhs " ")) next
			line = ""
			for (i = 1; i <= n; i++) if (f[i] != "") line = line (line == "" ? "" : " ") f[i]
			print "replace " line
		}' "$gomod"
}

# ---- throwaway modules ------------------------------------------------------------------------
# Set by build_flux_controller for gen_flux_controller (build calls GENFUNC DIR LOG only).
FC_NAME="" FC_VERSION="" FC_REPLACES="" FC_TOOLCHAIN=""

gen_flux_controller() {
	local dir="$1" gomod
	gomod="$(gomod_field "github.com/fluxcd/$FC_NAME@$FC_VERSION" GoMod "$FC_TOOLCHAIN")" || return 1
	local mods=() r
	for r in $FC_REPLACES; do
		mods+=("${r%@*}")
	done
	{
		echo "module testbin/$FC_NAME"
		echo
		go_header "$gomod"
		echo
		echo "require ("
		echo "	github.com/fluxcd/$FC_NAME $FC_VERSION"
		# the controller's go.mod replaces its api submodule with ./api, which does not apply here
		echo "	github.com/fluxcd/$FC_NAME/api $FC_VERSION"
		echo ")"
		echo
		echo "replace github.com/opencontainers/go-digest => github.com/opencontainers/go-digest $GO_DIGEST_VERSION"
		upstream_replaces "$gomod" github.com/opencontainers/go-digest "${mods[@]}"
		for r in $FC_REPLACES; do
			echo "replace ${r%@*} => ${r%@*} ${r##*@}"
		done
	} >"$dir/go.mod"
}

# flux_controller_pins NAME VERSION REPLACES TOOLCHAIN: the pins of a build_flux_controller build:
# module@version, then short=version for each replace (github.com/fluxcd/pkg/ dropped).
flux_controller_pins() {
	local pins="github.com/fluxcd/$1@$2" r
	for r in $3; do
		r="${r#github.com/fluxcd/pkg/}"
		pins+=" ${r%@*}=${r##*@}"
	done
	pins+=" go-digest=$GO_DIGEST_VERSION"
	if [[ "$4" != local ]]; then
		pins+=" go=$4"
	fi
	echo "$pins"
}

# build_flux_controller NAME VERSION REPLACES TOOLCHAIN ESTIMATE
build_flux_controller() {
	FC_NAME="$1" FC_VERSION="$2" FC_REPLACES="$3" FC_TOOLCHAIN="$4"
	build "$1" "$2" "$(flux_controller_pins "$1" "$2" "$3" "$4")" "github.com/fluxcd/$1" "$5" "" \
		gen_flux_controller "$4"
}

# ---- image-reflector-controller ---------------------------------------------------------------
IRC=image-reflector-controller

# image_reflector_pins: the pins of the binary (bin/.image-reflector-controller-<version>.pins).
image_reflector_pins() {
	flux_controller_pins "$IRC" "$IMAGE_REFLECTOR_CONTROLLER_VERSION" \
		"$IMAGE_REFLECTOR_CONTROLLER_REPLACES" "$IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN"
}

# build_image_reflector: bin/image-reflector-controller-<version>, and the symlink
# bin/flux/image-reflector-controller to it.
build_image_reflector() {
	((PLANNING)) || echo "---- $IRC $IMAGE_REFLECTOR_CONTROLLER_VERSION, go $IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN"
	# 253 s cold here (issue 48)
	build_flux_controller "$IRC" "$IMAGE_REFLECTOR_CONTROLLER_VERSION" "$IMAGE_REFLECTOR_CONTROLLER_REPLACES" \
		"$IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN" "5 min" || return 1
	((PLANNING)) && return 0
	mkdir -p "$BIN/flux"
	link "$BIN/flux/$IRC" "../$IRC-$IMAGE_REFLECTOR_CONTROLLER_VERSION"
}

# image_reflector_crds_pin: the word a CRD directory's .pins holds for these CRDs.
image_reflector_crds_pin() {
	echo "$IRC@$IMAGE_REFLECTOR_CONTROLLER_VERSION"
}

# copy_image_reflector_crds DIR: copies the module's config/crd/bases/*.yaml into DIR (the CRDs come
# from the module zip, so they are there even when the binary cannot be built).
copy_image_reflector_crds() {
	local moddir
	moddir="$(gomod_field "github.com/fluxcd/$(image_reflector_crds_pin)" Dir \
		"$IMAGE_REFLECTOR_CONTROLLER_GOTOOLCHAIN")" || return 1
	if ! compgen -G "$moddir/config/crd/bases/*.yaml" >/dev/null; then
		echo "FAILED: no CRDs in $moddir/config/crd/bases" >&2
		return 1
	fi
	# files in the module cache are read-only; give the copies normal permissions
	install -m 0644 "$moddir"/config/crd/bases/*.yaml "$1/"
}

# image_reflector_env FILE: sets FILE's IMAGE_REFLECTOR_CONTROLLER_BIN line to the binary if it is
# built at its pins, and removes the line otherwise (fluxenv then says how to build it).
image_reflector_env() {
	sed -i '/^IMAGE_REFLECTOR_CONTROLLER_BIN=/d' "$1"
	if up_to_date "$IRC" "$IMAGE_REFLECTOR_CONTROLLER_VERSION" "$(image_reflector_pins)"; then
		echo "IMAGE_REFLECTOR_CONTROLLER_BIN=$BIN/flux/$IRC" >>"$1"
	fi
}
