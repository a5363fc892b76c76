#!/bin/bash
# call_s56b.sh — session 56's first device call: call_s56a.sh's decode timeline (KILN_CUDA_TIMELINE build, llama-3-8b q4
# and qwen3-0.6b q4 batch-1, graphs and eager), then bench/cuda/stream_chain.cu (built here:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o build-tl/stream_chain bench/cuda/stream_chain.cu)
# on both models' token shapes: the plain read, a launch per phase, PDL launches, and one persistent kernel with a
# bulk-copy ring crossing each dependency with / without loading ahead. Package folder: build-tl (carry ["build-tl"]).
D=${1:-build-tl}
bash bench/cuda/call_s56a.sh $D/kiln-cuda.tar.xz > $OUT/s56a.txt 2>&1
tail -60 $OUT/s56a.txt
for m in llama qwen; do
  timeout 150 $D/stream_chain $m 4 6 8 13 > $OUT/chain_$m.txt 2>&1
  echo "== stream_chain $m rc=$?"; cat $OUT/chain_$m.txt
done
