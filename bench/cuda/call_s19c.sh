#!/bin/bash
# call_s19c.sh — session 19: environment-only A/Bs on one binary (combined.sh's batch-1 benches with VARIANTS
# set by the caller), then ncu of one batch-1 decode step of a 2-layer qwen3-0.6b bf16 synth at a 2048-token
# context under each NCU_ENV entry ("-" = defaults; VAR=V,VAR=V otherwise), the step's kernels only.
#   run: MODELS=... VARIANTS=... NCU_ENV="- KILN_CUDA_FUSE_NORM_MIN_K=1024" bash bench/cuda/call_s19c.sh PKG
P=${1:?package}
bash bench/cuda/combined.sh "$P"
export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k/kiln
$K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q06l2bf16 > /tmp/s/syn-q06l2.log 2>&1
i=0
for v in ${NCU_ENV:--}; do
  i=$((i + 1)); e=""; [ "$v" != - ] && e=$(echo "$v" | tr , ' ')
  env $e KILN_CUDA_GRAPH=0 timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $K bench /tmp/s/q06l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 3 --runs 1 --warmup-tokens 0 > /tmp/ncu_q$i.csv 2> /tmp/ncu_q$i.err
  echo "ncu q06l2bf16 [$v] rc=$?" >> "$OUT/summary.txt"
  { echo "# $v"; bash bench/cuda/ncu_tsv.sh /tmp/ncu_q$i.csv | tail -60; } > "$OUT/ncu_q06_$i.tsv"
done
tail -40 "$OUT/summary.txt"
