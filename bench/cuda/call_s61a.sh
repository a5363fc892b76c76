#!/bin/bash
# call_s61a.sh — (session 61) call_s60h.sh trimmed to fit what twelve refused starts left of the device budget: the ring
# tests (suite's 48, 384 with the fence, 384 without — must fail), the GEMV tests with the ring on, the in-chain check
# (expect 1280 gate/up launches compared now that the map table's hash is fixed), logits md5 off / ring (PDL) / ring plain,
# batch-1 llama-3-8b q4 off / ring ABAB and qwen3-0.6b q4 off / ring. Package: the default seven binaries (build-full).
P=${1:-build-full}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
KILN_CUDA_TEST_RING_ONLY=1 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_a.log 2>&1
echo "ring tests (suite's 48) rc=$? $(tail -1 /tmp/t_a.log)" >> $S; grep "FAIL" /tmp/t_a.log | head -3 >> $S
KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=384 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_b.log 2>&1
echo "ring tests stress 384 rc=$? $(tail -1 /tmp/t_b.log) at $(el) s" >> $S; grep "FAIL" /tmp/t_b.log | head -3 >> $S
KILN_CUDA_GEMV_RING_FENCE=0 KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=384 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_c.log 2>&1
echo "ring tests stress 384 WITHOUT the fence rc=$? $(tail -1 /tmp/t_c.log) at $(el) s" >> $S; grep "FAIL" /tmp/t_c.log | head -3 >> $S
call_ring_tests
call_wait l8q4 q06q4
IDS=$(seq -s, 1 40)
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
grep "ring check\|ring GEMV" /tmp/lg.log >> $S
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_PDL=0"
grep "ring GEMV" /tmp/lg.log >> $S
echo "checks done at $(el) s" >> $S
for i in 1 2; do call_b1 l8q4 kiln X=1; call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1; done
call_b1 q06q4 kiln X=1; call_b1 q06q4 kiln KILN_CUDA_GEMV_RING=1
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
