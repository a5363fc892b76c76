#!/bin/bash
# call_s61a.sh — (session 61) call_s60h.sh trimmed to fit what twelve refused starts left of the device budget: the ring
# tests (suite's 48, 384 with the fence, 384 without — must fail), the GEMV tests with the ring on, the in-chain check
# (expect 1280 gate/up launches compared now that the map table's hash is fixed), logits md5 off / ring (PDL) / ring plain,
# batch-1 llama-3-8b q4 off / ring ABAB and qwen3-0.6b q4 off / ring. Package: the default seven binaries (build-full).
P=${1:-build-full}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_ring_t1s
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
