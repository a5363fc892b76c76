#!/bin/bash
# call_s59f.sh — the ring alone is deterministic (call_s59e.sh: 2048 back-to-back repetitions bitwise), yet llama-3-8b q4's
# logits differ in some runs when only gate/up takes it (call_s59d.sh: 3 of 4): with it on gate/up only, logits ×4 as
# is, ×4 without PDL, ×4 with the ring's slots zeroed before its blocks exit (KILN_CUDA_GEMV_RING_SCRUB=1: does a later
# kernel read shared memory it did not write?). Package as call_s59a.sh.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
call_wait l8q4
IDS=$(seq -s, 1 40)
R=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2
for v in $R $R,KILN_CUDA_PDL=0 $R,KILN_CUDA_GEMV_RING_SCRUB=1; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $v" "kiln $v" "kiln $v" "kiln $v"
done
echo "done at $(el) s" >> $S
cat $S
