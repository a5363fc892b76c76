#!/bin/bash
# call_s51b.sh — session 51, second widen call: test_cuda_kernels' matmul subset (now with test_widen_policy: the default, =0,
# =1/=2 with the card squeezed under an eighth free), the load-time log line of a widened model, and the MoE path —
# qwen3.5-moe-35b at 4 layers, q3 (3-bit experts: with widening they take moe_gemm's grouped 4-bit GEMM) batch-1 and
# the engine at c=1 / 64 (128 + 128), default against KILN_CUDA_WIDEN=0.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q3 moe4q3 l8q3
call_t1 matmul KILN_CUDA_TEST_MATMUL_ONLY=1
grep -i "widen" /tmp/t_matmul.log | head -5 >> "$S"
call_wait l8q3 moe4q3
timeout 60 /tmp/k/kiln bench /tmp/s/l8q3 --backend cuda --prompt-tokens 16 --gen-tokens 4 2>&1 | grep -i "widen\|width" | head -3 >> "$S"
call_b1_widen moe4q3
call_conc_env moe4q3 X=1 1,64
call_conc_env moe4q3 KILN_CUDA_WIDEN=0 1,64
cat $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
