#!/bin/bash
# step_ncu.sh — per-kernel GPU times (ncu, graphs off, serialized: no PDL overlap) of the shapes that issue 8's
# open targets hinge on, for helpers to start from without spending their own device time (session 17):
#   1. a 64-row decode step of a 2-layer qwen3-0.6b at q4, q8 and bf16 (the c=64 ratio: q4/q8 steps 1.6-1.8x bf16's);
#   2. a 2048-token prefill of the same 2-layer qwen3-0.6b bf16 (the 50 % of the GEMM rate);
#   3. with L8DTYPES="q4 ..." (session 18), a 64-row decode step of a 2-layer llama-3-8b at those dtypes.
# DTYPES="q4 q8 bf16" picks the qwen3 steps; PRE=0 skips the prefill.
#   run: bash bench/cuda/step_ncu.sh PKG/kiln-cuda.tar.xz   (carry: the package's folder; ~90 s of command)
# Results in $OUT: ncu_<case>.tsv (kernel name, grid, block, µs, DRAM bytes), summary.txt.
set -u
T0=$(date +%s); el() { echo $(( $(date +%s) - T0 )); }
P=${1:?usage: step_ncu.sh PKG.tar.xz (or - with KDIR=an unpacked package)}
KD=${KDIR:-/tmp/k}
mkdir -p $KD /tmp/s && { [ "$P" = - ] || tar xJf $P -C $KD; } && export LD_LIBRARY_PATH=$KD/lib
S=$OUT/summary.txt
K=$KD/kiln
for d in ${DTYPES-q4 q8 bf16}; do
  [ -f /tmp/s/q06l2$d/config.json ] || $K synth --arch qwen3 --preset qwen3-0.6b --dtype $d --layers 2 --out /tmp/s/q06l2$d > /tmp/s/syn-$d.log 2>&1
done
[ "${PRE:-1}" = 0 ] || [ -f /tmp/s/q06l2bf16/config.json ] || $K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q06l2bf16 > /tmp/s/syn-bf16.log 2>&1
for d in ${L8DTYPES:-}; do
  [ -f /tmp/s/l8l2$d/config.json ] || $K synth --arch llama --preset llama-3-8b --dtype $d --layers 2 --out /tmp/s/l8l2$d > /tmp/s/syn-l8$d.log 2>&1
done
echo "synth at $(el)" >> $S
ncu1() { # case env... -- kiln bench args
  local c=$1; shift
  timeout 120 env "$@" > /tmp/ncu_$c.csv 2> /tmp/ncu_$c.err
  echo "ncu $c rc=$? at $(el)" >> $S
  bash bench/cuda/ncu_tsv.sh /tmp/ncu_$c.csv > $OUT/ncu_$c.tsv
}
NCU="ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv"
for d in ${DTYPES-q4 q8 bf16}; do
  ncu1 dec64_$d KILN_CUDA_GRAPH=0 $NCU $K bench /tmp/s/q06l2$d --backend cuda --concurrency 64 --prompt-tokens 8 \
    --gen-tokens 3 --max-batch 64 --kv-cache-gb 1 --warmup-tokens 0
done
for d in ${L8DTYPES:-}; do
  ncu1 l8dec64_$d KILN_CUDA_GRAPH=0 $NCU $K bench /tmp/s/l8l2$d --backend cuda --concurrency 64 --prompt-tokens 8 \
    --gen-tokens 3 --max-batch 64 --kv-cache-gb 1 --warmup-tokens 0
done
[ "${PRE:-1}" = 0 ] || ncu1 pre2048_bf16 KILN_CUDA_GRAPH=0 $NCU $K bench /tmp/s/q06l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 --warmup-tokens 0
echo "done at $(el)" >> $S
