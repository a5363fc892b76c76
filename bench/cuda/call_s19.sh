#!/bin/bash
# call_s19.sh — session 19's first device call: combined.sh (every CUDA test at default settings, the
# probe, batch-1 benches), then ncu of one llama-3-8b batch-1 decode step (2-layer bf16 synth, a
# 2048-token context, L2 not flushed, graphs off: kernels serialized, no PDL overlap) for the per-kernel
# times the bf16 80 % hinges on.
#   run: bash bench/cuda/call_s19.sh PKG/kiln-cuda.tar.xz  (carry: the package's folder)
P=${1:?package}
bash bench/cuda/combined.sh "$P"
export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k/kiln
for d in ${L8B1:-bf16}; do
  $K synth --arch llama --preset llama-3-8b --dtype $d --layers 2 --out /tmp/s/l8l2$d > /tmp/s/syn-l8l2$d.log 2>&1
  KILN_CUDA_GRAPH=0 timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $K bench /tmp/s/l8l2$d --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 --warmup-tokens 0 > /tmp/ncu_b1_$d.csv 2> /tmp/ncu_b1_$d.err
  echo "ncu b1 $d rc=$?" >> "$OUT/summary.txt"
  bash bench/cuda/ncu_tsv.sh /tmp/ncu_b1_$d.csv > "$OUT/ncu_b1_$d.tsv"
  tail -3 /tmp/ncu_b1_$d.err >> "$OUT/summary.txt"
done
tail -30 "$OUT/summary.txt"
