#!/usr/bin/env bash
# timed.sh DIR NAME CMD...: runs one suite of `make test`, its output both on the terminal and in
# DIR/NAME.log, and records its wall time and exit status in DIR/steps.tsv, so that the budget of
# CI (90 minutes, this project keeps under 60) is visible after every run. A failing suite prints
# the summary before make stops.
set -uo pipefail
dir=$1 name=$2
shift 2
mkdir -p "$dir"
start=$(date +%s)
"$@" 2>&1 | tee "$dir/$name.log"
rc=${PIPESTATUS[0]}
printf '%s\t%s\t%s\n' "$name" "$(($(date +%s) - start))" "$rc" >>"$dir/steps.tsv"
if [ "$rc" -ne 0 ]; then
	bash "$(dirname "$0")/test-summary.sh" "$dir"
fi
exit "$rc"
