#!/bin/bash
# call_s54a.sh — session 54, first call: the whole CUDA suite at main (test_cuda_kernels had run only as subsets since
# session 51's test_row_views), the issue table (combined.sh: ceilings, batch-1 decode and 2048-token prefill of
# llama-3-8b and qwen3-0.6b at q4 and bf16, llama-3-8b q4 through the engine at c=1 and 64), then session 53's oddity
# re-measured: qwen3-0.6b q4 prefill at 8000 tokens (60.8k tok/s from one run, under the 82.4k of 32000) as a curve
# over 4096 / 8000 / 16000 tokens, best of 3 runs each, and llama-3-8b q4 long-context decode at 8000 (best of 2).
P=${1:?package}
TESTS=${TESTS:-"test_cuda_kernels test_cuda_parity test_cuda_hybrid test_cuda_sample test_cuda_shapes"} \
  MODELS=${MODELS-"l8q4 l8bf16 q06q4 q06bf16"} CONC=${CONC-"l8q4:1,64"} bash bench/cuda/combined.sh "$P"
export LD_LIBRARY_PATH=/tmp/k/lib # combined.sh's export stays in its own process (session 54's call ran the loop below without it: rc=127)
for r in "q06q4 4096 3" "q06q4 8000 3" "q06q4 16000 3" "l8q4 8000 2"; do
  set -- $r
  timeout 150 /tmp/k/kiln bench /tmp/s/$1 --backend cuda --prompt-tokens $2 --gen-tokens 32 --runs $3 --json > /tmp/lc.json 2> /tmp/lc.err
  echo "long $1 $2 runs $3 rc=$?: $(tr -d '\n' < /tmp/lc.json | head -c 1500)" >> "$OUT/long.txt"
  tail -3 /tmp/lc.err >> "$OUT/long.txt"
done
cat "$OUT/long.txt"
