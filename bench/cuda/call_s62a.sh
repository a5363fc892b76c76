#!/bin/bash
# call_s62a.sh — (session 62) the ring GEMV is bitwise in the chain now (5160 launches compared, 0 differ) but slower
# (llama-3-8b q4 batch-1 282 vs 360 tok/s, session 62 call 1): which of its launches and which of its choices cost.
# Batch-1 (2048 + 128, --runs 2, with the step stats line) under each knob, llama-3-8b q4 then qwen3-0.6b q4; off and
# the plain ring again at the end for drift; then the step's kernel timeline off / ring. Package: build-s62, kiln alone and
# built with the timeline (CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln &&
# PACK_BINS=kiln bash bench/cuda/pack.sh /work/cb/s62t/b build-s62): two kilns do not fit the carry, and its stamps
# cost a load a block where KILN_CUDA_TIMELINE is unset, so the sweep runs on it too.
P=${1:-build-s62}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_wait l8q4 q06q4
R=KILN_CUDA_GEMV_RING=1
for m in l8q4 q06q4; do
  call_b1s $m X=1
  call_b1s $m $R
  call_b1s $m $R KILN_CUDA_GEMV_RING_PDL=0
  call_b1s $m $R KILN_CUDA_GEMV_RING_NSEG=1
  call_b1s $m $R KILN_CUDA_GEMV_RING_NSEG=2
  call_b1s $m $R KILN_CUDA_GEMV_RING_NSEG=3
  call_b1s $m $R KILN_CUDA_GEMV_RING_MINT=4
  call_b1s $m $R KILN_CUDA_GEMV_RING_MINT=8
  call_b1s $m $R KILN_CUDA_GEMV_RING_SMEM=200000
  call_b1s $m $R KILN_CUDA_GEMV_RING_SMEM=60000
  call_b1s $m $R KILN_CUDA_GEMV_RING_TRIG=end
  call_b1s $m $R KILN_CUDA_GEMV_RING_PREWAIT=0
  call_b1s $m $R KILN_CUDA_GEMV_RING_NS=4
  call_b1s $m X=1
  call_b1s $m $R
  echo "$m done at $(el) s" >> $S
done
# the decode step's kernel timeline (the package's kiln is a KILN_CUDA_TIMELINE=ON build, src/backend/cuda/timeline.cuh — its first
# device run), off and ring, llama-3-8b q4 and qwen3-0.6b q4, 2048 + 16 tokens, graphs on; bench/cuda/timeline.py
for m in l8q4 q06q4; do
  TL_SHOW=400 TL_TAIL=24 call_tl $m off X=1
  TL_SHOW=400 TL_TAIL=24 call_tl $m ring $R
done
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
