#!/bin/bash
# call_s28j.sh — session 28, call 10: the final tree (wgx.cuh on top of 85af0e6): the test subsets that run
# rmsnorm.cu's kernels (norms and ropes, the batch-1 GEMV chains with their norms, the bf16 GEMV fusions) and
# test_cuda_hybrid — rms_norm4_kernel gained the WG variant and an argument.
#   run: bash bench/cuda/call_s28j.sh PKG   (PACK_BINS="kiln test_cuda_kernels test_cuda_hybrid")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_t1 norm KILN_CUDA_TEST_NORM_ROPE_ONLY=1
call_t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
call_t1 fgemv KILN_CUDA_TEST_FUSED_GEMV_ONLY=1
call_t1 bfmma KILN_CUDA_TEST_BFMMA_ONLY=1
call_tbin test_cuda_hybrid
echo "all done at $(el) s" >> "$S"
cat "$S"
