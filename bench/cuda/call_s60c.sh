#!/bin/bash
# call_s60c.sh — (session 60) is it two ring blocks on one SM? call_s60b.sh: the PDL-launched ring (gate/up only) at
# a 200 KB budget gave llama-3-8b q4's logits bitwise 3/3, at 100 KB they differ (5/5 with every plain load L2-only,
# so not a stale L1 line). At 100 KB (x's f32 copy off: 105.6 KB needed for it) the ring has 4 slots and two of its
# blocks fit an SM; at 110 KB (112640 bytes) with KILN_CUDA_GEMV_TC_XF=0 it has the same 4 slots and the same x
# preparation, but no two ring blocks share an SM. Package: call_s60b.sh's (kiln-base = the tree).
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
cp /tmp/k/kiln-base /tmp/k/kiln
call_synth q4 l8q4
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=1,KILN_CUDA_GEMV_RING_NSEG=2,KILN_CUDA_GEMV_TC_XF=0
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln $R" "kiln $R" "kiln $R" \
  "kiln $R,KILN_CUDA_GEMV_RING_SMEM=112640" "kiln $R,KILN_CUDA_GEMV_RING_SMEM=112640" "kiln $R,KILN_CUDA_GEMV_RING_SMEM=112640" \
  "kiln $R,KILN_CUDA_GEMV_RING_SMEM=112640" "kiln $R,KILN_CUDA_GEMV_RING_SMEM=160000" "kiln $R,KILN_CUDA_GEMV_RING_SMEM=160000" \
  "kiln $R,KILN_CUDA_GEMV_RING_SMEM=160000"
echo "done at $(el) s" >> $S
cat $S
