#!/bin/bash
# call_s25i.sh — session 25, call 9: the review refactor of deltanet.cu (delta_decode's two kernels share the q/k
# norm sums, delta_qk_inv): the MoE/hybrid subset (delta_decode bitwise the separate ops) and test_cuda_hybrid.
#   run: bash bench/cuda/call_s25i.sh PKG   (PACK_BINS="test_cuda_kernels test_cuda_hybrid")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_t1 moe_v1 KILN_CUDA_TEST_MOE_ONLY=1 KILN_CUDA_DD_V=1
call_tbin test_cuda_hybrid
cat $S
