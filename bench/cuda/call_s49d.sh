#!/bin/bash
# call_s49d.sh — session 49: compute-sanitizer racecheck where it never finished — the decode attention (clusters,
# DSMEM merge, the fused rope + cache write) on the new five-case subset KILN_CUDA_TEST_ATTN_ONLY=decq
# — plus synccheck of it. Package: PACK_BINS="test_cuda_kernels".
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_t1 decq KILN_CUDA_TEST_ATTN_ONLY=decq
call_san racecheck 110 decq_race KILN_CUDA_TEST_ATTN_ONLY=decq -- /tmp/k/test_cuda_kernels
call_san synccheck 30 decq_sync KILN_CUDA_TEST_ATTN_ONLY=decq -- /tmp/k/test_cuda_kernels
echo "done at $(el) s" >> "$S"
