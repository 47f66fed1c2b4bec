#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) from the Go module proxy into
# bin/promtool-<version>, with bin/promtool a symlink to it, for `promtool check rules` and
# `promtool test rules` on config/monitoring (test/monitoring). Nothing
# prebuilt is downloaded; the binary comes from a throwaway module under bin/.build/ and is rebuilt
# only when a pin changes (hack/lib/build.sh). Override the pin: PROMETHEUS_VERSION=v0.x.0.
set -euo pipefail

# Prometheus 3.16.0 (its Go module versions are v0.<major><minor, two digits>.<patch>).
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
mkdir -p "$BUILD"

m=github.com/prometheus/prometheus
# promtool --version prints what prometheus/common/version holds: v0.316.0 is Prometheus 3.16.0.
IFS=. read -r _ mm patch <<<"$PROMETHEUS_VERSION"
release="$((mm / 100)).$((mm % 100)).$patch"
ldflags="-X github.com/prometheus/common/version.Version=$release -X github.com/prometheus/common/version.Branch=module"
ldflags+=" -X github.com/prometheus/common/version.Revision=$PROMETHEUS_VERSION"

build promtool "$PROMETHEUS_VERSION" "$m@$PROMETHEUS_VERSION" "$m/cmd/promtool" "6 min" "$ldflags" \
	"gen_require tools/promtool $m $PROMETHEUS_VERSION" || exit 1
link "$BIN/promtool" "promtool-$PROMETHEUS_VERSION"
"$BIN/promtool" --version | head -n 1
