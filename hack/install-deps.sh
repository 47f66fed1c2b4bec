#!/usr/bin/env bash
# Installs the system tools the build needs when they are missing: gcc (the engine's Node-API
# stub), npm (fetches the engine), openssl (checks its integrity), git and make; and Debian's
# chromium, which the e2e suite drives headless to test the browser view (test/e2e/ui_test.go).
set -euo pipefail
missing=()
for tool in gcc npm openssl git make nm; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
# The test runs /usr/bin/chromium itself: another chromium on PATH (a snap) does not count.
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
if ((${#missing[@]} == 0)); then
  echo "system tools: all present"
  exit 0
fi
echo "system tools missing: ${missing[*]}; installing with apt-get"
pkgs=()
for tool in "${missing[@]}"; do
  case "$tool" in
    gcc) pkgs+=(gcc libc6-dev) ;;
    npm) pkgs+=(nodejs npm) ;;
    nm) pkgs+=(binutils) ;;
    *) pkgs+=("$tool") ;;
  esac
done
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "${pkgs[@]}"
