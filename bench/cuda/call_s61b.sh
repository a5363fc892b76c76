#!/bin/bash
# call_s61b.sh — (session 61) after call_s60h: the whole CUDA suite with the ring GEMV on (KILN_CUDA_GEMV_RING=1
# exported: what making it the default would run), then the q4/q8 batch-1 rows ring on / off in ABAB order, and the
# ring under PDL for q8 (its first whole-model run at 8 bits). Package: the default seven binaries
# (bash bench/cuda/build_here.sh /work/cb/s26 && bash bench/cuda/pack.sh /work/cb/s26/b build-full; carry ["build-full"]).
P=${1:-build-full}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q8 l8q8 q06q8
export KILN_CUDA_GEMV_RING=1
call_full_tests
unset KILN_CUDA_GEMV_RING
call_wait l8q8 q06q8
IDS=$(seq -s, 1 40)
LG_TIMEOUT=30 call_logits /tmp/s/l8q8 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
grep "ring check\|ring GEMV" /tmp/lg.log >> $S
for i in 1 2; do
  call_b1 l8q8 kiln X=1; call_b1 l8q8 kiln KILN_CUDA_GEMV_RING=1
  call_b1 q06q8 kiln X=1; call_b1 q06q8 kiln KILN_CUDA_GEMV_RING=1
done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
