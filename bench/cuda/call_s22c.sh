#!/bin/bash
# call_s22c.sh — session 22, call 3: matmul_wgmma.cu v8 with the f16 slab (a warp whose scales/biases are all exact
# f16 factors keeps them so: no per-chunk scaling, checks or conversions; KILN_CUDA_QWG_HSLAB=0 = before): the
# wgmma tests (test_qwg compares both forms bitwise with v2), parity, the per-matmul timings, the engine A/B at c=64.
#   run: bash bench/cuda/call_s22c.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4  # written while the tests run (combined.sh skips them then)
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg_multi KILN_CUDA_TEST_QWG_MULTI_ONLY=1
timeout 100 /tmp/k/test_cuda_parity > /tmp/par.log 2>&1; echo "parity rc=$? $(tail -1 /tmp/par.log)" >> $S
KILN_CUDA_TEST_QWG_BENCH=1 timeout 200 /tmp/k/test_cuda_kernels > /tmp/qb.log 2>&1; grep "qwg bench" /tmp/qb.log >> $S
cat $S
TESTS=" " MODELS="" VARIANTS="" CONC_ENV="KILN_CUDA_STEP_STATS=64" \
  CONC="l8q4:1,64 l8q4:64:KILN_CUDA_QWG_HSLAB=0 l8q4:64 l8q4:64:KILN_CUDA_QWG_HSLAB=0 l8q4:64 q06q4:1,64 q06q4:64:KILN_CUDA_QWG_HSLAB=0 q06q4:64" \
  bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> $OUT/summary.txt
