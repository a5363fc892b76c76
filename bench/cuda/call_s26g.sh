#!/bin/bash
# call_s26g.sh — session 26, call 7: the QWG bench's every line on the final kernel (e55da8c) — v8 with and without the
# f16 slab and its copies-only probe (KILN_CUDA_QWG_PROBE=1: the ring's copies with no conversion or wgmma), to see how
# much of the 4-bit 64-token matmul is now the copy floor.
#   run: bash bench/cuda/call_s26g.sh PKG   (PACK_BINS="test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
for r in 1 2; do KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" >> $OUT/qwgbench.txt; done
echo "done at $(el) s" >> "$S"
cat $S
