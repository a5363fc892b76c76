#!/bin/bash
# call_s55c.sh — session 55: the fused rope + decode attention without its q write-back (attention.cu: the one block a
# cluster that holds row p rotated q in global memory after everything else — qwen3: reloaded, re-normed, four block
# barriers — and the o projection's PDL wait waited for it; nothing reads q after the attention, so it is now scratch,
# KILN_CUDA_ATTN_QKEEP=1 restores the write-back). The decode-attention tests (nra_case: out, k and the caches bitwise
# the separate ops, q untouched by default and the separate ops' q under QKEEP=1; attn_chain_case against
# ref_attention on q rotated by the rope op), `kiln logits` md5 default vs QKEEP=1 (must be equal: q is not read
# after), then batch-1 decode alternating default / QKEEP=1 over two rounds on llama-3-8b q4 and qwen3-0.6b q4
# (cut to the budget left). Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels kiln-cuda-probe &&
# PACK_BINS="kiln test_cuda_kernels kiln-cuda-probe" bash bench/cuda/pack.sh /work/cb/s26/b build-lead; carry ["build-lead"].
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 attdec KILN_CUDA_TEST_ATTN_ONLY=dec
call_wait q06q4 l8q4
IDS=$(seq -s, 1 40)
call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_ATTN_QKEEP=1"
call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_ATTN_QKEEP=1"
for r in 1 2; do for m in l8q4 q06q4; do for v in X=1 KILN_CUDA_ATTN_QKEEP=1; do call_b1 $m kiln $v; done; done; done
paste - - < $OUT/bench.txt >> "$S"
echo "done at $(el) s" >> "$S"
cat "$S"
