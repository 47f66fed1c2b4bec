# shellcheck shell=bash
# Shared by hack/promtool.sh and hack/prometheus.sh (source it after hack/lib/build.sh; it defines
# settings only): the one Prometheus pin, and the -X flags that stamp it into the binaries.
# Override the pin: PROMETHEUS_VERSION=v0.x.0.

# Prometheus 3.16.0 (its Go module versions are v0.<major><minor, two digits>.<patch>).
PROMETHEUS_VERSION="${PROMETHEUS_VERSION:-v0.316.0}"
PROMETHEUS_MODULE=github.com/prometheus/prometheus

# --version prints what prometheus/common/version holds: v0.316.0 is Prometheus 3.16.0.
IFS=. read -r _ _prom_mm _prom_patch <<<"$PROMETHEUS_VERSION"
PROMETHEUS_RELEASE="$((_prom_mm / 100)).$((_prom_mm % 100)).$_prom_patch"
PROMETHEUS_LDFLAGS="-X github.com/prometheus/common/version.Version=$PROMETHEUS_RELEASE"
PROMETHEUS_LDFLAGS+=" -X github.com/prometheus/common/version.Branch=module"
PROMETHEUS_LDFLAGS+=" -X github.com/prometheus/common/version.Revision=$PROMETHEUS_VERSION"
unset _prom_mm _prom_patch
