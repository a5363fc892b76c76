#!/bin/bash
# call_s41b.sh — session 41, call 2: the prefill-matmul subset again (test_qd_fused's sets fixed: a down weight's
# columns must be whole groups), then where a 2048-token qwen3-0.6b prefill's GPU time goes, kernel by kernel (ncu,
# one prefill + 2 decode steps): q4 with the fused ops, q4 without (KILN_CUDA_QD_FUSE=0) and bf16.
#   PACK_BINS="kiln test_cuda_kernels"; run: bash bench/cuda/call_s41b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4
call_synth bf16 q06bf16
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
grep "qd fused\|lt fused\|qdeq f16:" /tmp/t_qgemm.log >> "$S"
call_wait q06q4 q06bf16
call_ncu_prefill q06q4 X=1
call_ncu_prefill q06q4 KILN_CUDA_QD_FUSE=0
call_ncu_prefill q06bf16 X=1
cat "$S" $OUT/ncu.txt
