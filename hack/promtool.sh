#!/usr/bin/env bash
# Builds promtool (github.com/prometheus/prometheus/cmd/promtool) from the Go module proxy into
# bin/promtool-<version>, with bin/promtool a symlink to it, for `promtool check rules` and
# `promtool test rules` on config/monitoring (test/monitoring). Nothing
# prebuilt is downloaded; the binary comes from a throwaway module under bin/.build/ and is rebuilt
# only when a pin changes (hack/lib/build.sh). Override the pin: PROMETHEUS_VERSION=v0.x.0 (the
# pin is shared with hack/prometheus.sh, in hack/lib/prometheus.sh).
set -euo pipefail

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
# shellcheck source=hack/lib/prometheus.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/prometheus.sh"
mkdir -p "$BUILD"

m="$PROMETHEUS_MODULE"
build promtool "$PROMETHEUS_VERSION" "$m@$PROMETHEUS_VERSION" "$m/cmd/promtool" "6 min" "$PROMETHEUS_LDFLAGS" \
	"gen_require tools/promtool $m $PROMETHEUS_VERSION" || exit 1
link "$BIN/promtool" "promtool-$PROMETHEUS_VERSION"
"$BIN/promtool" --version | head -n 1
