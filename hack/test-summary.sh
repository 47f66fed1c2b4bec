#!/usr/bin/env bash
# test-summary.sh DIR: the time summary of `make test` from what hack/timed.sh recorded: each
# suite's wall time and status, then the slowest packages (go test's own times; packages of one
# suite run side by side, two at a time on two cores, so they add up to more than the suite).
set -euo pipefail
dir=$1
[ -f "$dir/steps.tsv" ] || exit 0
echo
echo "== time summary of make test (wall seconds; logs in $dir)"
awk -F'\t' '{ total += $2; printf "  %-28s %6d s  %s\n", $1, $2, ($3 == 0 ? "ok" : "FAILED (exit " $3 ")") }
	END { printf "  %-28s %6d s  (%.1f min)\n", "total", total, total / 60 }' "$dir/steps.tsv"
echo "  slowest packages:"
for f in "$dir"/*.log; do
	step=$(basename "$f" .log)
	# go test's package lines: "ok  <pkg> 12.3s" and "FAIL <pkg> 12.3s"
	awk -v step="$step" '($1 == "ok" || $1 == "FAIL") && $NF ~ /^[0-9.]+s$/ && $2 ~ /\// {
		t = $NF; sub(/s$/, "", t); pkg = $2; sub(/^github.com\/kcl-flux\/kcl-artifact-controller\//, "", pkg)
		printf "%s\t%s\t%s\t%s\n", t, step, pkg, $1 }' "$f"
done | sort -t$'\t' -k1,1 -gr | head -12 | awk -F'\t' '{ printf "    %-40s %7.1f s  %s (%s)\n", $3, $1, $4, $2 }'
