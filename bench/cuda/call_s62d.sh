#!/bin/bash
# call_s62d.sh — (session 62) the batch-1 decode attention's qwen3 head-norm weights read into shared memory before
# the PDL wait (now on main; run as bench/cuda/attn_hnw_s62.patch against the tree with call_s62c's norm change): tests touching the decode
# attention (subsets), logits md5 base / new (must be equal), batch-1 ABAB on qwen3-0.6b q4 and bf16. Package:
# build-s62c (PATCH=bench/cuda/attn_hnw_s62.patch bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels;
# PACK_BINS="kiln kiln-base test_cuda_kernels").
P=${1:-build-s62c}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4
call_synth bf16 q06bf16
T1_TIMEOUT=90
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=1
call_t1 norm_rope KILN_CUDA_TEST_NORM_ROPE_ONLY=1
call_t1 chain KILN_CUDA_TEST_CHAIN_ONLY=1
echo "subsets done at $(el) s" >> $S
call_wait q06q4 q06bf16
IDS=$(seq -s, 1 40)
for m in q06q4 q06bf16; do LG_TIMEOUT=40 call_logits /tmp/s/$m "kiln-base X=1" "kiln X=1"; done
for i in 1 2 3; do
  for m in q06q4 q06bf16; do call_b1 $m kiln-base X=1; call_b1 $m kiln X=1; done
done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
