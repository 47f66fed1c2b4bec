#!/usr/bin/env bash
# Installs the system tools the build needs when they are missing: gcc (the engine's Node-API
# stub), npm (fetches the engine), openssl (checks its integrity), git and make.
set -euo pipefail
missing=()
for tool in gcc npm openssl git make nm; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
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
