#!/bin/bash
# call_s61c.sh — (session 61) the least of call_s61a.sh that answers "is the whole ring right, and faster?": the ring
# tests (suite's 48; 384 without the fence — must fail), the in-chain check on llama-3-8b q4 (expect 1280 compared),
# logits md5 off / ring, batch-1 off / ring once. Package: build-full.
P=${1:-build-full}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
KILN_CUDA_TEST_RING_ONLY=1 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_a.log 2>&1
echo "ring tests (suite's 48) rc=$? $(tail -1 /tmp/t_a.log) at $(el) s" >> $S; grep "FAIL" /tmp/t_a.log | head -3 >> $S
KILN_CUDA_GEMV_RING_FENCE=0 KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=384 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_c.log 2>&1
echo "ring tests stress 384 WITHOUT the fence rc=$? $(tail -1 /tmp/t_c.log) at $(el) s" >> $S; grep "FAIL" /tmp/t_c.log | head -3 >> $S
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
