#!/bin/bash
# call_s47g.sh — session 47's last call: the subsets the 2-row dispatch rule (58e43d0) was not yet run under — MoE,
# the attention's decode tests — and test_cuda_shapes / test_cuda_sample at that tree.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_tbin test_cuda_shapes test_cuda_sample
echo "done at $(el) s" >> $S
cat $S
