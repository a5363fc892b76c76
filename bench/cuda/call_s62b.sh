#!/bin/bash
# call_s62b.sh — (session 62) after call_s62a: the ring at one block an SM (KILN_CUDA_GEMV_RING_SMEM=200000) measured
# level with the default GEMV, and the timeline put llama-3-8b q4's two single-block add_rms_norm launches at ~11 µs of
# an 85-µs layer. So: the fused decode ops (KILN_CUDA_TC_FUSE=1: the norm in the GEMV's prologue, the add in its store,
# the GLU in its epilogue — opt-in since session 10's +1 %) against the default, ABAB, with the ring at 200 KB and both;
# their logits md5 (bitwise by design); and their timelines. Also KILN_CUDA_GEMV_TC_WAVE1=0 (q/k/v as 192 blocks of
# 8 warps, not 128 of 12): the attention after it (32K registers a block) could then be resident beside it on 72 SMs. Package: build-s62 (kiln built with the timeline).
P=${1:-build-s62}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_wait l8q4 q06q4
IDS=$(seq -s, 1 40)
LG_TIMEOUT=40 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_TC_FUSE=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_SMEM=200000"
F=KILN_CUDA_TC_FUSE=1
RB="KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_SMEM=200000"
for m in l8q4 q06q4; do
  for i in 1 2; do
    call_b1s $m X=1
    call_b1s $m $F
    call_b1s $m $RB
    call_b1s $m $RB $F
    call_b1s $m KILN_CUDA_GEMV_TC_WAVE1=0
  done
  echo "$m done at $(el) s" >> $S
done
call_tl l8q4 fuse $F
call_tl l8q4 ring200 $RB
call_tl l8q4 wave1off KILN_CUDA_GEMV_TC_WAVE1=0
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
