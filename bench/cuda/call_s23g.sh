#!/bin/bash
# call_s23g.sh — session 23, call 7: the review refactor (qg_afrag, moe_util.cuh, delta_state, the
# tests' per_expert_loop; PTX identical) run once: the MoE/hybrid subset, the prefill-matmul subset
# (matmul_qgemm.cu), test_cuda_hybrid.
# Not run in session 23 (its device time was spent): the next session's first call.
#   run: bash bench/cuda/call_s23g.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_tbin test_cuda_hybrid
cat $S
