#!/bin/bash
# call_s59g.sh — the gate/up-only ring's run-to-run logits difference needs PDL (call_s59f.sh: 0 of 4 without it, 2 of 4
# with, 2 of 4 with the slots scrubbed): which overlap — logits ×3 each with the ring itself launched without PDL
# (the kernels around it with), with the ring letting its successors in only at its end, and as is. Package as call_s59a.sh.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2
for v in $R,KILN_CUDA_GEMV_RING_PDL=0 $R,KILN_CUDA_GEMV_RING_TRIG=end $R; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $v" "kiln $v" "kiln $v" "kiln $v"
done
echo "done at $(el) s" >> $S
cat $S
