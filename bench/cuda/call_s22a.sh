#!/bin/bash
# call_s22a.sh — session 22, call 1: matmul_wgmma.cu's v9 (256-row blocks, KILN_CUDA_QWG_V=9, opt-in):
# its tests (test_qwg: bitwise v2 on every case; the multi launch with v9), parity under v9, the
# per-matmul timing of llama-3-8b's q4 shapes at 64 tokens (KILN_CUDA_TEST_QWG_BENCH), then the
# engine A/B at c=64 (llama-3-8b q4, qwen3-0.6b q4) through combined.sh.
#   run: bash bench/cuda/call_s22a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4  # written while the tests run (combined.sh skips them then)
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg_multi KILN_CUDA_TEST_QWG_MULTI_ONLY=1
KILN_CUDA_QWG_V=9 timeout 100 /tmp/k/test_cuda_parity > /tmp/par9.log 2>&1; echo "parity (QWG_V=9) rc=$? $(tail -1 /tmp/par9.log)" >> $S
KILN_CUDA_TEST_QWG_BENCH=1 timeout 200 /tmp/k/test_cuda_kernels > /tmp/qb.log 2>&1; grep "qwg bench" /tmp/qb.log >> $S
cat $S
TESTS=" " MODELS="" VARIANTS="" CONC_ENV="KILN_CUDA_STEP_STATS=64" \
  CONC="l8q4:1,64 l8q4:64:KILN_CUDA_QWG_V=9 l8q4:64 l8q4:64:KILN_CUDA_QWG_V=9 q06q4:1,64 q06q4:64:KILN_CUDA_QWG_V=9 q06q4:64" \
  bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> $OUT/summary.txt
