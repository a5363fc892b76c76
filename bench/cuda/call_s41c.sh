#!/bin/bash
# call_s41c.sh — session 41, call 3: the whole suite and the issue table at the final tree (combined.sh: llama-3-8b q4 /
# bf16, qwen3-0.6b q4 / bf16 batch-1 decode and 2048-token prefill, qwen3-0.6b q4 again without the fused prefill ops,
# the engine's c=1 / c=64 on llama-3-8b q4), then where a 2048-token qwen3-0.6b prefill's GPU time goes, kernel by
# kernel (ncu: q4 with the fused ops, bf16).
#   all test binaries + kiln-cuda-probe packed; run: bash bench/cuda/call_s41c.sh PKG
P=${1:?package}
MODELS="l8q4 l8bf16 q06q4 q06bf16" VARIANTS="KILN_CUDA_QD_FUSE=0:q06q4" CONC="l8q4:1,64" bash bench/cuda/combined.sh "$P"
export LD_LIBRARY_PATH=/tmp/k/lib
. bench/cuda/call_lib.sh
call_ncu_prefill q06q4 X=1
call_ncu_prefill q06bf16 X=1
cat $OUT/ncu.txt
