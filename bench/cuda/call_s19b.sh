#!/bin/bash
# call_s19b.sh — session 19's A/B call for the GM_NORM prologue (KILN_CUDA_NORM_PRO): the fused-GEMV
# tests under each setting, then combined.sh's batch-1 benches with the variants interleaved
# (VARIANTS, set by the caller), then ncu of the 2-layer llama-3-8b bf16 decode step per setting.
# KILN_CUDA_NORM_PRO exists only with bench/cuda/norm_pro.patch applied (not kept on main).
#   run: VARIANTS="..." bash bench/cuda/call_s19b.sh PKG/kiln-cuda.tar.xz  (carry: the package's folder)
P=${1:?package}
mkdir -p /tmp/k && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
S=$OUT/pre.txt
for v in ${PRO_TESTS:-0 3}; do
  KILN_CUDA_NORM_PRO=$v KILN_CUDA_TEST_FUSED_GEMV_ONLY=1 /tmp/k/test_cuda_kernels > /tmp/tf_$v.log 2>&1
  echo "NORM_PRO=$v fused-gemv subset rc=$? $(tail -1 /tmp/tf_$v.log)" >> $S
  grep -i fail /tmp/tf_$v.log | head -5 >> $S
done
TESTS="${TESTS:-test_cuda_parity}" bash bench/cuda/combined.sh "$P"
K=/tmp/k/kiln
$K synth --arch llama --preset llama-3-8b --dtype bf16 --layers 2 --out /tmp/s/l8l2bf16 > /tmp/s/syn.log 2>&1
for v in ${NCU_PRO:-0 3}; do
  KILN_CUDA_NORM_PRO=$v KILN_CUDA_GRAPH=0 timeout 150 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $K bench /tmp/s/l8l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 4 --runs 1 --warmup-tokens 0 > /tmp/ncu_$v.csv 2> /tmp/ncu_$v.err
  echo "ncu NORM_PRO=$v rc=$?" >> $S
  bash bench/cuda/ncu_tsv.sh /tmp/ncu_$v.csv | grep -E "gemvp_multi|glu_kernel" > "$OUT/ncu_pro$v.tsv"
done
cat $S >> "$OUT/summary.txt"
tail -40 "$OUT/summary.txt"
