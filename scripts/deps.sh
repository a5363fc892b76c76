#!/usr/bin/env bash
# Installs the Debian packages kiln needs to build and test, only those missing.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
      libmicrohttpd-dev libsqlite3-dev libzstd-dev libcurl4-openssl-dev libcmocka-dev
      nodejs npm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "deps: run as root (or install: ${missing[*]})" >&2; exit 1; fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
