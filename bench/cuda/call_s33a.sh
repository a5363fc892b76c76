#!/bin/bash
# call_s33a.sh — session 33, call 2: the graph crash's model-level test. test_cuda_kernels'
# test_attention_decode_graph_growth passed on the code before the fix (call 1), so it does not catch
# that crash; test_cuda_hybrid's check_graph_growth decodes a 2-layer qwen3-0.6b-shaped checkpoint
# through 400 positions eager and in graphs. Expected: passes as built, fails (crash or differing
# logits) with KILN_CUDA_GRAPH_SIG=0 (the graph key without the cluster signature: the old code).
#   PACK_BINS="test_cuda_hybrid test_cuda_kernels"; run: bash bench/cuda/call_s33a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
KILN_TEST_HYBRID_ONLY=graph timeout 120 /tmp/k/test_cuda_hybrid > $OUT/graph_fixed.log 2>&1; echo "fixed: rc=$? at $(el) s" >> "$S"
KILN_CUDA_GRAPH_SIG=0 KILN_TEST_HYBRID_ONLY=graph timeout 120 /tmp/k/test_cuda_hybrid > $OUT/graph_sig0.log 2>&1; echo "sig0 (old key): rc=$? at $(el) s" >> "$S"
KILN_CUDA_GRAPH_SIG=0 KILN_CUDA_TEST_ATTN_ONLY=dec timeout 120 /tmp/k/test_cuda_kernels > $OUT/kern_sig0.log 2>&1; echo "kernels dec, sig0: rc=$? at $(el) s" >> "$S"
timeout 120 /tmp/k/test_cuda_hybrid > $OUT/hybrid.log 2>&1; echo "hybrid all: rc=$? at $(el) s" >> "$S"
tail -3 $OUT/graph_fixed.log $OUT/graph_sig0.log $OUT/kern_sig0.log $OUT/hybrid.log >> "$S"
cat "$S"
