#!/usr/bin/env bash
# Installs what kiln needs to build and test, only what is missing. Libraries are checked
# with dpkg; tools by command, since they may come from elsewhere (this image's node/npm
# are not Debian's packages, and installing Debian's npm over them conflicts).
set -euo pipefail
need_pkg=(build-essential cmake pkg-config libjansson-dev libpcre2-dev libutf8proc-dev
          libmicrohttpd-dev libsqlite3-dev libzstd-dev libcurl4-openssl-dev libcmocka-dev)
missing=()
for p in "${need_pkg[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v python3 >/dev/null || missing+=(python3)
command -v node >/dev/null || missing+=(nodejs)
command -v npm >/dev/null || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "deps: installing ${missing[*]}"
  if [ "$(id -u)" -ne 0 ]; then echo "deps: run as root, or install: ${missing[*]}" >&2; exit 1; fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi
