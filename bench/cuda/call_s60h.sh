#!/bin/bash
# call_s60h.sh — (session 60) the final tree's ring: test_gemv_ring and the new stress test (a third of its
# repetitions plain, a third PDL-launched, a third PDL-launched two blocks an SM; 48 in the suite, 384 here), the
# GEMV tests with the ring on, and the same stress test without the fence (KILN_CUDA_GEMV_RING_FENCE=0: it must fail —
# the test's power); then — the map table's hash fixed after call_s60g — the whole ring measured for the first time.
# Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead   (carry ["build-lead"])
# NOT RUN: session 60's device time ran out; the next session's first call.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4 # in the background while the tests run
call_ring_t1s
call_ring_tests
# the map table's hash (fixed after call_s60g): before, the ring took gate/up in 4 of llama-3-8b's 32 layers; now the
# check must compare all 40 × 32 = 1280 gate/up launches, and the whole ring is measured for the first time
call_wait l8q4 q06q4
IDS=$(seq -s, 1 40)
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
grep "ring check\|ring GEMV" /tmp/lg.log >> $S
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=0"
grep "ring GEMV" /tmp/lg.log >> $S
LG_TIMEOUT=30 call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
for i in 1 2; do
  call_b1 l8q4 kiln X=1; call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1; call_b1 l8q4 kiln "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_PDL=0"
  call_b1 q06q4 kiln X=1; call_b1 q06q4 kiln KILN_CUDA_GEMV_RING=1
done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
