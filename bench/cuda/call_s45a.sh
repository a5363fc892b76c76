#!/bin/bash
# call_s45a.sh — session 45's first call: the whole suite and the issue table at main (session 43's default-on
# one-wave GEMV grid had never run the whole suite), llama-3-8b q4 through the engine at c = 1, 8, 32, 64, then
# where an 8-row decode step's time goes (KILN_CUDA_PROFILE=8 against =1: per op kind, graphs off) and c=8 with
# KILN_CUDA_QWG=2 (the wgmma kernel from 2 tokens instead of qmma_kernel). Package: the default seven binaries.
P=${1:?package}
MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,8,32,64" bash bench/cuda/combined.sh "$P" > /dev/null
X=$OUT/extra.txt
export LD_LIBRARY_PATH=/tmp/k/lib
for pt in 1 8; do
  c=$pt
  echo "=== KILN_CUDA_PROFILE=$pt concurrency $c" >> $X
  KILN_CUDA_PROFILE=$pt /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --concurrency $c --prompt-tokens 128 --gen-tokens 64 \
    --max-batch 128 --kv-cache-gb 16 --json >> $X 2>&1
done
for v in X=1 KILN_CUDA_QWG=2 X=1 KILN_CUDA_QWG=2; do
  echo "=== c=8 $v" >> $X
  env $v /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --concurrency 8 --prompt-tokens 128 --gen-tokens 128 \
    --max-batch 128 --kv-cache-gb 16 --json >> $X 2>&1
done
cat $OUT/summary.txt; grep -v '^{' $X | tail -60
