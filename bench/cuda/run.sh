#!/bin/bash
# run.sh — the CUDA benchmarks of bench/cuda/RESULTS.md, in one go on the GPU machine.
#
#   bench/cuda/run.sh BUILD_DIR OUT_DIR [MODELS...]
#
# 1. kiln-cuda-probe: device copy/read bandwidth and cuBLASLt bf16 GEMM rates (ceilings)
# 2. for each MODEL (preset:dtype, default qwen3-0.6b and llama-3-8b at bf16, q8, q4):
#    kiln synth writes a random-weight checkpoint to $SYNTH_DIR (default /tmp/kiln-synth),
#    kiln bench --backend cuda measures prefill over 2048 tokens and batch-1 decode over
#    128 tokens (best of 2 runs), then the checkpoint is deleted (disk is 64 GB there).
# Output: OUT_DIR/probe.jsonl, OUT_DIR/bench.jsonl, OUT_DIR/log.txt
set -u
B=${1:?build dir}; O=${2:?out dir}; shift 2
MODELS=${*:-"qwen3-0.6b:bf16 qwen3-0.6b:q8 qwen3-0.6b:q4 llama-3-8b:q4 llama-3-8b:q8 llama-3-8b:bf16"}
SYN=${SYNTH_DIR:-/tmp/kiln-synth}
PROMPT=${PROMPT_TOKENS:-2048}; GEN=${GEN_TOKENS:-128}
mkdir -p "$O" "$SYN"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv >> "$O/log.txt" 2>&1
"$B/kiln-cuda-probe" > "$O/probe.jsonl" 2>> "$O/log.txt"
for m in $MODELS; do
  preset=${m%%:*}; dt=${m##*:}; dir="$SYN/$preset-$dt"
  rm -rf "$dir"
  t0=$(date +%s)
  if ! "$B/kiln" synth --preset "$preset" --dtype "$dt" --out "$dir" >> "$O/log.txt" 2>&1; then
    echo "synth $m failed" >> "$O/log.txt"; continue
  fi
  t1=$(date +%s)
  echo "synth $m: $((t1 - t0)) s" >> "$O/log.txt"
  "$B/kiln" bench "$dir" --backend cuda --prompt-tokens "$PROMPT" --gen-tokens "$GEN" --runs 2 --json >> "$O/bench.jsonl" 2>> "$O/log.txt" \
    || echo "bench $m failed" >> "$O/log.txt"
  echo "bench $m: $(( $(date +%s) - t1 )) s" >> "$O/log.txt"
  rm -rf "$dir"
done
