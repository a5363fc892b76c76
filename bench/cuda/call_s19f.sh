#!/bin/bash
# call_s19f.sh — session 19: the batch-1 decode attention at 16 warps a block and clusters of at most 8
# (KILN_CUDA_ATTN_WARPS=16) against the default 8 warps / clusters of 16: the tensor-core decode attention tests
# and test_cuda_parity under each, ncu of the attention launch per setting (2-layer qwen3-0.6b bf16, 2048-token
# context), then combined.sh's batch-1 benches (MODELS/VARIANTS from the caller).
# KILN_CUDA_ATTN_WARPS exists only with bench/cuda/attn_warps16.patch applied (not kept on main).
#   run: MODELS=... VARIANTS=... bash bench/cuda/call_s19f.sh PKG
P=${1:?package}
mkdir -p /tmp/k /tmp/s && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k/kiln
S=$OUT/pre.txt
$K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q06l2bf16 > /tmp/s/syn.log 2>&1
for w in 8 16; do
  KILN_CUDA_ATTN_WARPS=$w KILN_CUDA_TEST_ATTN_ONLY=dec timeout 120 /tmp/k/test_cuda_kernels > /tmp/td_$w.log 2>&1
  echo "WARPS=$w attn dec tests rc=$? $(tail -1 /tmp/td_$w.log)" >> $S; grep -i fail /tmp/td_$w.log | head -5 >> $S
  KILN_CUDA_ATTN_WARPS=$w timeout 60 /tmp/k/test_cuda_parity > /tmp/tp_$w.log 2>&1
  echo "WARPS=$w parity rc=$? $(tail -1 /tmp/tp_$w.log)" >> $S; grep -i fail /tmp/tp_$w.log | head -5 >> $S
  KILN_CUDA_ATTN_WARPS=$w KILN_CUDA_GRAPH=0 timeout 100 ncu --clock-control none --cache-control none -k regex:attn_dec_mma \
    --metrics gpu__time_duration.sum,sm__cycles_active.avg,gpc__cycles_elapsed.max --csv \
    $K bench /tmp/s/q06l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 3 --runs 1 --warmup-tokens 0 > /tmp/nc_$w.csv 2>/dev/null
  echo "WARPS=$w ncu attn:" >> $S
  bash bench/cuda/ncu_tsv.sh /tmp/nc_$w.csv | tail -12 >> $S
done
export TESTS=" "
bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> "$OUT/summary.txt"
tail -50 "$OUT/summary.txt"
