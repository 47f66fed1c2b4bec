#!/usr/bin/env bash
# Builds the binaries of a real single Kubernetes node from the Go module proxy, and installs the
# Debian packages it needs, into ./bin. Nothing prebuilt is downloaded: each binary comes from a
# throwaway Go module under bin/.build/<name>-<version>/ (hack/lib/build.sh, shared with testbin.sh).
#
# Every binary is keyed by its pins: bin/<name>-<version> plus bin/.<name>-<version>.pins. It is
# rebuilt only when a pin changes; otherwise this script prints "up to date". A build that failed
# is remembered in bin/.<name>-<version>.failed (same pins) and not tried again until a pin changes
# or NODEBIN_RETRY=1 is set.
#
# Usage: hack/nodebin.sh [PART...]   PART: runc containerd coredns kube-router kube (default: all of
# them, in that order). The Debian packages are checked (and installed when missing) every time.
# The kube part shares most of its compile work with testbin.sh's kube-apiserver (same go.mod but
# for the module path): building it after kube-apiserver saves several minutes.
#
# Outputs:
#   bin/kube-node-<v>/{kubelet,kube-controller-manager,kube-scheduler,kube-proxy,kubectl}
#   bin/containerd-<v>/{containerd,containerd-shim-runc-v2,ctr}
#   bin/runc-<v>, bin/coredns-<v>, bin/kube-router-<v>
#   bin/node/*     symlinks to all of the above (containerd finds containerd-shim-runc-v2 on PATH:
#                  put bin/node on the PATH of containerd)
#   bin/node.env   absolute paths, KEY=VALUE lines; written (only when it changes) once every part is
#                  built at its pins and runs
#   Debian: containernetworking-plugins (CNI plugins in /usr/lib/cni), iptables, conntrack, ipset
#           (kube-router's NetworkPolicy firewall), libseccomp-dev, gcc, pkg-config
#
# All pins can be overridden from the environment, e.g. CONTAINERD_VERSION=v2.4.1 hack/nodebin.sh
# shellcheck disable=SC2317 # the part_* and checks_* functions are called by name
set -euo pipefail

# ---- pins -------------------------------------------------------------------------------------
# kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl: KUBE_VERSION and
# KUBE_STAGING_VERSION, in hack/lib/build.sh (the same Kubernetes as testbin.sh's kube-apiserver).
# containerd: github.com/containerd/containerd/v2 (Debian's 1.6 is too old for kubelet 1.37).
# no_btrfs: no btrfs snapshotter (it needs cgo and btrfs headers); urfave_cli_no_docs as upstream.
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.4.2}"
CONTAINERD_BUILD_TAGS="${CONTAINERD_BUILD_TAGS:-no_btrfs,urfave_cli_no_docs}"
# runc: github.com/opencontainers/runc with cgo and Debian's libseccomp (its version is embedded
# from the module's VERSION file). Upstream's default tags add libpathrs, which needs a library
# Debian does not have.
RUNC_VERSION="${RUNC_VERSION:-v1.5.2}"
RUNC_BUILD_TAGS="${RUNC_BUILD_TAGS:-seccomp,urfave_cli_no_docs}"
# coredns: github.com/coredns/coredns, default plugin set (kubernetes included) for cluster DNS.
COREDNS_VERSION="${COREDNS_VERSION:-v1.15.0}"
# kube-router: github.com/cloudnativelabs/kube-router/v2, run on the node with only its
# NetworkPolicy firewall (iptables and ipset), since the ptp CNI enforces no NetworkPolicy. Its
# go.mod pins client-go v0.29, so nothing is shared with the Kubernetes build: a cold build.
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
# Debian packages (installed with apt-get when missing; conntrack is skipped when apt has none).
NODE_DEBS="${NODE_DEBS:-containernetworking-plugins iptables conntrack ipset libseccomp-dev gcc libc6-dev pkg-config}"
CNI_BIN_DIR="${CNI_BIN_DIR:-/usr/lib/cni}"
CNI_PLUGINS="bridge host-local loopback portmap ptp"
# -------------------------------------------------------------------------------------------------

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
RETRY_VAR=NODEBIN_RETRY

KUBE_CMDS="kubelet kube-controller-manager kube-scheduler kube-proxy kubectl"
CONTAINERD_CMDS="containerd containerd-shim-runc-v2 ctr"

kube_pins="k8s.io/kubernetes@$KUBE_VERSION staging=$KUBE_STAGING_VERSION cmds=${KUBE_CMDS// /,}"
containerd_pins="github.com/containerd/containerd/v2@$CONTAINERD_VERSION tags=$CONTAINERD_BUILD_TAGS"
containerd_pins+=" cmds=${CONTAINERD_CMDS// /,}"
runc_pins="github.com/opencontainers/runc@$RUNC_VERSION tags=$RUNC_BUILD_TAGS cgo=1"
coredns_pins="github.com/coredns/coredns@$COREDNS_VERSION"
kube_router_pins="github.com/cloudnativelabs/kube-router/v2@$KUBE_ROUTER_VERSION"

ALL_PARTS="runc containerd coredns kube-router kube"

mkdir -p "$BUILD" "$BIN/node"

# ---- Debian packages --------------------------------------------------------------------------
deb_installed() {
	[[ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" == "install ok installed" ]]
}

ensure_debs() {
	local missing=() p
	for p in $NODE_DEBS; do
		deb_installed "$p" || missing+=("$p")
	done
	if ((${#missing[@]} == 0)); then
		echo "debian packages: all present ($NODE_DEBS)"
		return 0
	fi
	if ((EUID != 0)); then
		echo "FAILED: debian packages missing: ${missing[*]}; as root: apt-get install ${missing[*]}" >&2
		return 1
	fi
	echo "debian packages missing: ${missing[*]}; installing with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	local install=()
	for p in "${missing[@]}"; do
		if [[ "$p" == conntrack ]] && ! apt-cache show conntrack >/dev/null 2>&1; then
			echo "  note: apt has no conntrack package; skipped (kube-proxy runs without it)"
			continue
		fi
		install+=("$p")
	done
	if ((${#install[@]} > 0)); then
		apt-get install -y -qq "${install[@]}" >/dev/null
		echo "  installed: ${install[*]}"
	fi
}

# ---- parts ------------------------------------------------------------------------------------
part_runc() {
	echo "---- runc $RUNC_VERSION (cgo, Debian's libseccomp, tags $RUNC_BUILD_TAGS)"
	CGO_ENABLED=1 BUILD_TAGS="$RUNC_BUILD_TAGS" build runc "$RUNC_VERSION" "$runc_pins" \
		github.com/opencontainers/runc "1 min" "" \
		"gen_require nodebin/runc github.com/opencontainers/runc $RUNC_VERSION"
}

part_containerd() {
	echo "---- containerd $CONTAINERD_VERSION ($CONTAINERD_CMDS; tags $CONTAINERD_BUILD_TAGS)"
	local m=github.com/containerd/containerd/v2 c pkgs=""
	for c in $CONTAINERD_CMDS; do
		pkgs+=" $m/cmd/$c"
	done
	BUILD_TAGS="$CONTAINERD_BUILD_TAGS" build containerd "$CONTAINERD_VERSION" "$containerd_pins" \
		"${pkgs# }" "3 min" "-X $m/version.Version=$CONTAINERD_VERSION -X $m/version.Package=$m" \
		"gen_require nodebin/containerd $m $CONTAINERD_VERSION"
}

part_coredns() {
	echo "---- coredns $COREDNS_VERSION"
	build coredns "$COREDNS_VERSION" "$coredns_pins" github.com/coredns/coredns "4 min" \
		"-X github.com/coredns/coredns/coremain.GitCommit=$COREDNS_VERSION" \
		"gen_require nodebin/coredns github.com/coredns/coredns $COREDNS_VERSION"
}

part_kube-router() {
	echo "---- kube-router $KUBE_ROUTER_VERSION (NetworkPolicy firewall)"
	local m=github.com/cloudnativelabs/kube-router/v2
	build kube-router "$KUBE_ROUTER_VERSION" "$kube_router_pins" "$m/cmd/kube-router" "2 min" \
		"-X $m/pkg/version.Version=$KUBE_ROUTER_VERSION -X $m/pkg/version.BuildDate=pinned" \
		"gen_require nodebin/kube-router $m $KUBE_ROUTER_VERSION"
}

part_kube() {
	echo "---- kubernetes $KUBE_VERSION ($KUBE_CMDS; one go build)"
	if [[ ! -x "$BIN/kube-apiserver-$KUBE_VERSION" ]]; then
		echo "  note: bin/kube-apiserver-$KUBE_VERSION is not built yet: this build does not reuse its compile" \
			"work (make testbin first to save several minutes)"
	fi
	local c pkgs=""
	for c in $KUBE_CMDS; do
		pkgs+=" k8s.io/kubernetes/cmd/$c"
	done
	build kube-node "$KUBE_VERSION" "$kube_pins" "${pkgs# }" "5 min after kube-apiserver, 15 min alone" \
		"$(kube_version_ldflags)" "gen_kubernetes nodebin/kube-node"
}

# ---- checks: each binary runs, with what the node needs compiled in ---------------------------
# check PATH PATTERN ARG...: run PATH ARG... and print the first line of its output that matches
# the extended regular expression PATTERN; fail when none does.
check() {
	local bin="$1" pattern="$2" out
	shift 2
	local line
	if ! out="$("$bin" "$@" 2>&1)" || ! line="$(grep -m 1 -E "$pattern" <<<"$out")"; then
		echo "FAILED: $(rel "$bin") $* does not print /$pattern/:" >&2
		echo "$out" | tail -n 20 >&2
		return 1
	fi
	printf '  %-50s %s\n' "$(rel "$bin") $*:" "${line#"${line%%[! ]*}"}"
}

checks_runc() {
	# "libseccomp: 2.x" is printed only when seccomp support is compiled in
	check "$BIN/runc-$RUNC_VERSION" "^runc version ${RUNC_VERSION#v}" --version &&
		check "$BIN/runc-$RUNC_VERSION" '^libseccomp: ' --version
}

checks_containerd() {
	local d="$BIN/containerd-$CONTAINERD_VERSION" v="${CONTAINERD_VERSION#v}"
	check "$d/containerd" "containerd .* v?$v" --version &&
		check "$d/containerd-shim-runc-v2" "Version: +v?$v" -v &&
		check "$d/ctr" "ctr .*v?$v" --version
}

checks_coredns() {
	check "$BIN/coredns-$COREDNS_VERSION" "CoreDNS-${COREDNS_VERSION#v}" -version &&
		check "$BIN/coredns-$COREDNS_VERSION" '^ *(dns\.)?kubernetes$' -plugins
}

checks_kube-router() {
	check "$BIN/kube-router-$KUBE_ROUTER_VERSION" "version $KUBE_ROUTER_VERSION" --version
}

checks_kube() {
	local c
	for c in $KUBE_CMDS; do
		if [[ "$c" == kubectl ]]; then
			check "$BIN/kube-node-$KUBE_VERSION/$c" "^Client Version: $KUBE_VERSION\$" version --client || return 1
		else
			check "$BIN/kube-node-$KUBE_VERSION/$c" "^Kubernetes $KUBE_VERSION\$" --version || return 1
		fi
	done
}

checks_system() {
	local p missing=()
	for p in $CNI_PLUGINS; do
		[[ -x "$CNI_BIN_DIR/$p" ]] || missing+=("$p")
	done
	if ((${#missing[@]} > 0)); then
		echo "FAILED: CNI plugins missing from $CNI_BIN_DIR: ${missing[*]}" >&2
		return 1
	fi
	echo "  $CNI_BIN_DIR: $CNI_PLUGINS"
	IPTABLES="$(command -v iptables || echo /usr/sbin/iptables)"
	CONNTRACK="$(command -v conntrack || true)"
	check "$IPTABLES" '^iptables v' --version &&
		check "$(command -v ipset || echo /usr/sbin/ipset)" '^ipset v' version
}

# part_current PART: whether PART's outputs are built at the current pins.
part_current() {
	case "$1" in
	runc) up_to_date runc "$RUNC_VERSION" "$runc_pins" ;;
	containerd) up_to_date containerd "$CONTAINERD_VERSION" "$containerd_pins" ;;
	coredns) up_to_date coredns "$COREDNS_VERSION" "$coredns_pins" ;;
	kube-router) up_to_date kube-router "$KUBE_ROUTER_VERSION" "$kube_router_pins" ;;
	kube) up_to_date kube-node "$KUBE_VERSION" "$kube_pins" ;;
	esac
}

# ---- bin/node and bin/node.env ----------------------------------------------------------------
write_node_env() {
	local c
	for c in $KUBE_CMDS; do
		link "$BIN/node/$c" "../kube-node-$KUBE_VERSION/$c"
	done
	for c in $CONTAINERD_CMDS; do
		link "$BIN/node/$c" "../containerd-$CONTAINERD_VERSION/$c"
	done
	link "$BIN/node/runc" "../runc-$RUNC_VERSION"
	link "$BIN/node/coredns" "../coredns-$COREDNS_VERSION"
	link "$BIN/node/kube-router" "../kube-router-$KUBE_ROUTER_VERSION"
	local k="$BIN/kube-node-$KUBE_VERSION" d="$BIN/containerd-$CONTAINERD_VERSION"
	cat >"$BIN/node.env.tmp" <<-EOF
		NODE_BIN_DIR=$BIN/node
		KUBELET=$k/kubelet
		KUBE_CONTROLLER_MANAGER=$k/kube-controller-manager
		KUBE_SCHEDULER=$k/kube-scheduler
		KUBE_PROXY=$k/kube-proxy
		KUBECTL=$k/kubectl
		CONTAINERD=$d/containerd
		CONTAINERD_SHIM_RUNC_V2=$d/containerd-shim-runc-v2
		CTR=$d/ctr
		RUNC=$BIN/runc-$RUNC_VERSION
		COREDNS=$BIN/coredns-$COREDNS_VERSION
		KUBE_ROUTER=$BIN/kube-router-$KUBE_ROUTER_VERSION
		CNI_BIN_DIR=$CNI_BIN_DIR
		IPTABLES=$IPTABLES
	EOF
	if [[ -n "$CONNTRACK" ]]; then
		echo "CONNTRACK=$CONNTRACK" >>"$BIN/node.env.tmp"
	fi
	replace_if_changed "$BIN/node.env.tmp" "$BIN/node.env"
}

# ---- main -------------------------------------------------------------------------------------
parts=("$@")
if ((${#parts[@]} == 0)); then
	read -ra parts <<<"$ALL_PARTS"
fi
for p in "${parts[@]}"; do
	if [[ " $ALL_PARTS " != *" $p "* ]]; then
		echo "FAILED: unknown part \"$p\" (parts: $ALL_PARTS)" >&2
		exit 1
	fi
done

ensure_debs || exit 1

status=0
for p in "${parts[@]}"; do
	"part_$p" || status=1
done

echo "---- checks"
IPTABLES="" CONNTRACK=""
checks_system || status=1
absent=()
for p in $ALL_PARTS; do
	if ! part_current "$p"; then
		absent+=("$p")
	elif ! "checks_$p"; then
		absent+=("$p")
		status=1
	fi
done

if ((${#absent[@]} == 0 && status == 0)); then
	write_node_env
else
	echo "bin/node.env not written: not built (or not working) at the current pins: ${absent[*]:-none}" >&2
	[[ -z "${absent[*]}" ]] || echo "  (hack/nodebin.sh ${absent[*]} builds them)" >&2
fi

echo "pinned versions (go $("$GO" env GOVERSION)):"
echo "  kubelet, kube-controller-manager, kube-scheduler, kube-proxy, kubectl  $KUBE_VERSION" \
	"(k8s.io/kubernetes, staging $KUBE_STAGING_VERSION)"
echo "  containerd           $CONTAINERD_VERSION (tags $CONTAINERD_BUILD_TAGS)"
echo "  runc                 $RUNC_VERSION (cgo, tags $RUNC_BUILD_TAGS)"
echo "  coredns              $COREDNS_VERSION"
echo "  kube-router          $KUBE_ROUTER_VERSION"
echo "  debian               $NODE_DEBS"
exit "$status"
