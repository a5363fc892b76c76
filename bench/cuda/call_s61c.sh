#!/bin/bash
# call_s61c.sh — (session 61) the least of call_s61a.sh that answers "is the whole ring right, and faster?": the ring
# tests (suite's 48; 384 without the fence — must fail), the in-chain check on llama-3-8b q4 (expect 1280 compared),
# logits md5 off / ring, batch-1 off / ring once. Package: build-full.
P=${1:-build-full}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
T1_TIMEOUT=60 # a hang must not take the whole call
call_t1 ring_suite48 KILN_CUDA_TEST_RING_ONLY=1
call_t1 ring_stress384_NO_FENCE_must_fail KILN_CUDA_GEMV_RING_FENCE=0 KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=384
call_wait l8q4
IDS=$(seq -s, 1 40)
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
grep "ring check\|ring GEMV" /tmp/lg.log >> $S
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
grep "ring GEMV" /tmp/lg.log >> $S
echo "checks done at $(el) s" >> $S
call_b1 l8q4 kiln X=1; call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
