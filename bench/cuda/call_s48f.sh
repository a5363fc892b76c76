#!/bin/bash
# call_s48f.sh — session 48, call 6: compute-sanitizer memcheck over test_cuda_kernels' subsets (after dev_copy's
# 16-byte padding: call 5 found qmma_kernel's 4-byte scale-word read 2 bytes past an odd-length scales array),
# racecheck on the decode attention, and the other CUDA test binaries. Per line: tool, subset, ERROR SUMMARY,
# the subset's check count; then the first reports of any that found errors.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
for sub in GEMV FUSED_GEMV QMMA QGEMM QWG_MULTI MOE NORM_ROPE; do
  call_san memcheck 30 $sub KILN_CUDA_TEST_${sub}_ONLY=1 -- /tmp/k/test_cuda_kernels
done
call_san memcheck 40 bfmma KILN_CUDA_TEST_BFMMA_ONLY=1 -- /tmp/k/test_cuda_kernels
call_san memcheck 45 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec -- /tmp/k/test_cuda_kernels
call_san memcheck 45 attn_single KILN_CUDA_TEST_ATTN_ONLY=single -- /tmp/k/test_cuda_kernels
call_san memcheck 30 sample X=1 -- /tmp/k/test_cuda_sample
echo "done at $(el) s" >> "$S"
