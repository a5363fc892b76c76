#!/bin/bash
# call_s32f.sh — session 32, call 8: the graph-update crash. `kiln bench --backend cuda --prompt-tokens 16|64
# --gen-tokens 128` died with an unspecified launch failure once the context passed 128 positions (call 7: gen 112 fine,
# 113 not; KILN_CUDA_GRAPH=0 or KILN_CUDA_ATTN_CLUSTER=1 fine): the decode attention's splits went 1 → 2 (a cluster of
# 2) and cudaGraphExecUpdate kept the old cluster shape. Fix: the capture's cluster shapes are part of the graph key
# (cuda_impl_t.cap_sig). test_cuda_kernels-old = the code before the fix with the new test
# (test_attention_decode_graph_growth), expected to fail; test_cuda_kernels = the fix.
#   PACK_BINS="kiln test_cuda_kernels test_cuda_kernels-old test_cuda_hybrid test_cuda_parity"; run: bash bench/cuda/call_s32f.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth bf16 q06bf16
call_synth q4 l8q4
KILN_CUDA_TEST_ATTN_ONLY=dec timeout 60 /tmp/k/test_cuda_kernels-old > /tmp/old.log 2>&1
echo "old (before the fix): rc=$? $(grep -i 'graph\|fail\|cuda:' /tmp/old.log | head -4)" >> "$S"
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=dec
grep "growing contexts" /tmp/t_attn.log >> "$S"
call_tbin test_cuda_hybrid test_cuda_parity
call_wait q06bf16 l8q4
for m in q06bf16 l8q4; do
  for p in 16 64 2048; do
    echo "== $m prompt $p: $(timeout 60 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens $p --gen-tokens 256 --runs 2 --json 2>&1 | tail -1 | grep -o '"decode_tok_s": [0-9.]*\|cuda:.*' | tr '\n' ' ')" >> $OUT/bench.txt
  done
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
