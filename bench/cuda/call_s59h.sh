#!/bin/bash
# call_s59h.sh — the gate/up-only ring's logits difference needs the ring PDL-launched (call_s59g.sh: 0 of 4 launched
# plain, 4 of 4 with its successors let in only at its end): logits ×4 with the producer also waiting before its first
# copy (KILN_CUDA_GEMV_RING_PREWAIT=0: no copy before griddepcontrol.wait); then batch-1 for the record — off, ring,
# ring launched without PDL, ring without pre-wait copies, ring at 200 KB. Package as call_s59a.sh.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $R,KILN_CUDA_GEMV_RING_PREWAIT=0" "kiln $R,KILN_CUDA_GEMV_RING_PREWAIT=0" \
  "kiln $R,KILN_CUDA_GEMV_RING_PREWAIT=0" "kiln $R,KILN_CUDA_GEMV_RING_PREWAIT=0" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=0" \
  "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=0"
call_wait q06q4
Q=KILN_CUDA_GEMV_RING=1
for v in X=1 $Q "$Q KILN_CUDA_GEMV_RING_PDL=0" "$Q KILN_CUDA_GEMV_RING_PREWAIT=0" "$Q KILN_CUDA_GEMV_RING_SMEM=204800"; do
  call_b1 l8q4 kiln "$v"; call_b1 q06q4 kiln "$v"
done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
