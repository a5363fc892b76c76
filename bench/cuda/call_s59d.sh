#!/bin/bash
# call_s59d.sh — after call_s59c.sh (maps in device memory: batch-1 llama-3-8b q4 ring 343–345 vs 358–361 tok/s, one
# of three ring logits runs still differing): where the remaining difference comes from — llama-3-8b q4 logits
# ×4 each: off, ring, ring with the decode attention launched without PDL, ring on q/k/v only (NSEG=3), on gate/up only
# (NSEG=2); then the ring's shared-memory budget (ring depth): batch-1 at 100 KB (default), 140 KB, 200 KB.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
call_wait q06q4 l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1
for v in X=1 $R $R,KILN_CUDA_ATTN_PDL=0 $R,KILN_CUDA_GEMV_RING_NSEG=3 $R,KILN_CUDA_GEMV_RING_NSEG=2; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $v" "kiln $v" "kiln $v" "kiln $v"
done
for b in 102400 143360 204800; do call_b1s l8q4 $R KILN_CUDA_GEMV_RING_SMEM=$b; call_b1s q06q4 $R KILN_CUDA_GEMV_RING_SMEM=$b; done
call_b1s l8q4 X=1; call_b1s q06q4 X=1
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
