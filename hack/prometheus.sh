#!/usr/bin/env bash
# Builds the Prometheus server (github.com/prometheus/prometheus/cmd/prometheus) from the Go module
# proxy into bin/prometheus-<version>, with bin/prometheus a symlink to it, for the tests that need
# a real Prometheus scraping a real target (test/fluxenv: StartPrometheus). Built without the
# builtinassets tag: the web UI's assets are not in the binary (the UI pages answer with an error),
# but the server starts and its HTTP API (/-/ready, /api/v1/query, ...) works. Nothing prebuilt is
# downloaded; the binary comes from a throwaway module under bin/.build/ and is rebuilt only when a
# pin changes (hack/lib/build.sh). Override the pin: PROMETHEUS_VERSION=v0.x.0 (the pin is shared
# with hack/promtool.sh, in hack/lib/prometheus.sh).
set -euo pipefail

# shellcheck source=hack/lib/build.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/build.sh"
# shellcheck source=hack/lib/prometheus.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/prometheus.sh"
mkdir -p "$BUILD"

m="$PROMETHEUS_MODULE"
BUILD_TAGS= build prometheus "$PROMETHEUS_VERSION" "$m@$PROMETHEUS_VERSION" "$m/cmd/prometheus" "8 min" "$PROMETHEUS_LDFLAGS" \
	"gen_require tools/prometheus $m $PROMETHEUS_VERSION" || exit 1
link "$BIN/prometheus" "prometheus-$PROMETHEUS_VERSION"
"$BIN/prometheus" --version | head -n 1
