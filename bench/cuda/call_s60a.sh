#!/bin/bash
# call_s60a.sh — (for session 60) does bench/cuda/attn_rk_cg_s59.patch end the PDL-launched ring's run-to-run logits
# difference? The patch reads the own block's k head by __ldcg into shared memory in the fused decode attention's
# llama path (no head norms), as qwen3's path already did — llama varied, qwen3 did not in its 2 PDL-launched runs (session 59). kiln-base =
# the tree, kiln = with the patch. Package:
#   PATCH=bench/cuda/attn_rk_cg_s59.patch bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#   PACK_BINS="kiln kiln-base test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead   (carry ["build-lead"])
# Then: llama-3-8b q4 logits ×4 each with the PDL-launched ring on gate/up (KILN_CUDA_GEMV_RING_PDL=1, _NSEG=2) for
# kiln-base and kiln, both without the ring (the patch bitwise the tree), kiln-base with both PREWAIT=0 and TRIG=end, the decode attention tests with the patch,
# and batch-1 llama-3-8b q4 / qwen3-0.6b q4 kiln-base vs kiln; then the ring only on blocks of >= 6 tiles
# (KILN_CUDA_GEMV_RING_MINT=6), plain and PDL-launched, and the whole ring PDL-launched (timed and its logits twice).
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
KILN_CUDA_TEST_ATTN_ONLY=dec timeout 120 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
echo "attention dec tests (patched) rc=$? $(tail -1 /tmp/t.log)" >> $S; grep FAIL /tmp/t.log | head -4 >> $S
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1,KILN_CUDA_GEMV_RING_NSEG=2
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln-base X=1" "kiln X=1" "kiln-base $R" "kiln-base $R" "kiln-base $R" "kiln-base $R" "kiln $R" "kiln $R" "kiln $R" "kiln $R"
# session 59 tried no pre-wait copies and a late trigger one at a time (each still differed), never both at once
B=$R,KILN_CUDA_GEMV_RING_PREWAIT=0,KILN_CUDA_GEMV_RING_TRIG=end
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln-base $B" "kiln-base $B" "kiln-base $B" "kiln-base $B"
call_wait q06q4
for b in kiln-base kiln kiln-base kiln; do call_b1 l8q4 $b X=1; call_b1 q06q4 $b X=1; done
# the ring only where a block gets >= 6 tiles (llama-3-8b: gate/up, lm_head), launched plain and by PDL (the patched
# binary: if the patch ended the difference, the PDL-launched ring is the one worth timing)
for v in "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_MINT=6" "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_MINT=6 KILN_CUDA_GEMV_RING_PDL=1" \
         "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_PDL=1"; do
  call_b1 l8q4 kiln "$v"; call_b1 q06q4 kiln "$v"
done
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1"
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
