#!/bin/bash
# call_s21b.sh — session 21: x prepared by its producer (KILN_CUDA_XPREP) measured again on HEAD's
# tree: test_cuda_parity at XPREP=0/2/3, then batch-1 A/B rounds of 0 / 2 (the GLU per span) / 3
# (2 + the norms) on llama-3-8b q4, and 0 / 2 on qwen3-0.6b q4 and llama-3-8b q8 (combined.sh, no tests).
#   run: bash bench/cuda/call_s21b.sh PKG
P=${1:?package}
mkdir -p /tmp/k && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
for x in 0 2 3; do
  KILN_CUDA_XPREP=$x timeout 100 /tmp/k/test_cuda_parity > /tmp/p$x.log 2>&1
  echo "parity XPREP=$x rc=$? $(tail -1 /tmp/p$x.log)" >> $OUT/pre.txt; grep FAIL /tmp/p$x.log | head -3 >> $OUT/pre.txt
done
KILN_CUDA_XPREP=2 KILN_CUDA_TEST_GEMV_ONLY=1 timeout 120 /tmp/k/test_cuda_kernels > /tmp/g2.log 2>&1
echo "test_cuda_kernels GEMV_ONLY XPREP=2 rc=$? $(tail -1 /tmp/g2.log)" >> $OUT/pre.txt
R="KILN_CUDA_XPREP=2:l8q4 KILN_CUDA_XPREP=3:l8q4 KILN_X=0:l8q4"
TESTS=" " MODELS="l8q4" CONC="" VARIANTS="$R $R $R KILN_CUDA_XPREP=2:q06q4 KILN_X=0:q06q4 KILN_CUDA_XPREP=2:q06q4 KILN_X=0:q06q4 KILN_CUDA_XPREP=2:l8q8 KILN_X=0:l8q8 KILN_CUDA_XPREP=2:l8q8" \
  bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $OUT/pre.txt >> $OUT/summary.txt
