#!/bin/bash
# call_s52a.sh — session 52, first call: the whole CUDA suite at main (session 51's test_row_views and the widening
# review refactor had never run on a device) and the issue table (combined.sh: copy / GEMM ceilings, batch-1 decode and
# (TESTS=none by default: call_s52b.sh ran them on this machine just before) 2048-token prefill of llama-3-8b and qwen3-0.6b at q4 and bf16, llama-3-8b q4 through the engine at c=1 and 64);
# then batch-1 decode at long contexts, never measured on CUDA before: llama-3-8b q4 / bf16 at 8000 positions (its
# max_position_embeddings is 8192), qwen3-0.6b q4 at 8000 and 32000 (40960) — tok/s, K/V bytes a token and the read rate.
P=${1:?package}
TESTS=${TESTS:-none} MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,64" bash bench/cuda/combined.sh "$P"
for r in "l8q4 8000" "l8bf16 8000" "q06q4 8000" "q06q4 32000"; do
  set -- $r
  timeout 120 /tmp/k/kiln bench /tmp/s/$1 --backend cuda --prompt-tokens $2 --gen-tokens 64 --runs 2 --json > /tmp/lc.json 2> /tmp/lc.err
  echo "long $1 $2 rc=$?: $(tr -d '\n' < /tmp/lc.json | head -c 1500)" >> "$OUT/long.txt"
  tail -3 /tmp/lc.err >> "$OUT/long.txt"
done
cat "$OUT/long.txt"
