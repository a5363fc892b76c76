#!/usr/bin/env bash
# The SDK test suite of kiln serve (tests/server): the official openai and @anthropic-ai/sdk
# npm packages, pinned by tests/server/package-lock.json, installed into
# tests/server/node_modules (git-ignored). Skipped when they are already installed at the
# locked versions.
set -euo pipefail
dir=tests/server
[ -f "$dir/package-lock.json" ] || exit 0
if ! command -v npm >/dev/null; then
  echo "test-setup: npm not found; the server SDK tests (tests/server) will fail" >&2
  exit 0
fi
stamp="$dir/node_modules/.package-lock.json"
if [ -f "$stamp" ] && [ "$stamp" -nt "$dir/package-lock.json" ]; then exit 0; fi
echo "test-setup: npm ci in $dir"
(cd "$dir" && npm ci --no-audit --no-fund --silent)
