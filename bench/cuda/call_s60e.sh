#!/bin/bash
# call_s60e.sh — (session 60) two ring blocks on one SM? Every 4-slot setup (100, 112, and 200 KB with _NS=4) allocates
# 88 KB, so two ring blocks can share an SM — and differed; 160 / 200 KB (8 / 10 slots: 163 / 200 KB) cannot — bitwise.
# KILN_CUDA_GEMV_RING_GRID=N (new, diagnosis) launches up to N blocks instead of one an SM: at 264 two blocks share
# an SM in plain launches too. The ring tests (bitwise against gemv_tc_kernel) and llama-3-8b q4 logits under it, and
# the in-chain check (KILN_CUDA_GEMV_RING_CHECK=1) with the rows of the first differing launch. Package: kiln +
# test_cuda_kernels of the tree.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4
for g in 132 264; do
  KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=128 KILN_CUDA_GEMV_RING_GRID=$g timeout 60 /tmp/k/test_cuda_kernels > /tmp/t_$g.log 2>&1
  echo "ring tests GRID=$g rc=$? $(tail -1 /tmp/t_$g.log)" >> $S; grep -i "fail" /tmp/t_$g.log | head -6 >> $S
done
call_wait l8q4
IDS=$(seq -s, 1 40)
P0=KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=2
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $P0" "kiln $P0,KILN_CUDA_GEMV_RING_GRID=264" "kiln $P0,KILN_CUDA_GEMV_RING_GRID=264" \
  "kiln $P0,KILN_CUDA_GEMV_RING_GRID=264,KILN_CUDA_GEMV_RING_SMEM=200000"
for i in 1 2 3; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $P0,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1,KILN_CUDA_GEMV_RING_GRID=264"
  grep "ring check" /tmp/lg.log >> $S
done
for i in 1 2 3; do
  LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln $P0,KILN_CUDA_GEMV_RING_PDL=1,KILN_CUDA_GRAPH=0,KILN_CUDA_GEMV_RING_CHECK=1"
  grep "ring check" /tmp/lg.log >> $S
done
echo "done at $(el) s" >> $S
cat $S
