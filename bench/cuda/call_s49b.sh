#!/bin/bash
# call_s49b.sh — session 49: `kiln serve --backend cuda` end to end (tests/cuda/serve_smoke.py) on qwen3-0.6b bf16 and
# q4 synths with the real Qwen3 tokenizer (carried as PKGDIR/qwen3-tok.tar.xz: tests/.cache/tokenizers/qwen3's
# tokenizer.json + tokenizer_config.json — not in the repository). Package: PACK_BINS="kiln" bench/cuda/pack.sh.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth bf16 q06bf16
call_synth q4 q06q4
call_wait q06bf16 q06q4
for m in q06bf16 q06q4; do
  tar xJf "$(dirname "$P")/qwen3-tok.tar.xz" -C /tmp/s/$m
  echo "== serve_smoke $m (cuda)" >> "$S"
  timeout 280 python3 tests/cuda/serve_smoke.py /tmp/k/kiln /tmp/s/$m --backend cuda --concurrency 32 >> "$S" 2>&1
  echo "rc=$? at $(el) s" >> "$S"
done
echo "done at $(el) s" >> "$S"
