#!/bin/bash
# call_s59b.sh — the quad-slot ring GEMV after call_s59a.sh (H100: bitwise alone, ncu time level with gemv_tc_kernel,
# but batch-1 llama-3-8b q4 280 vs 358 tok/s and its logits differing): tensor maps now cached per weight (the step's
# re-capture encoded ~670 a token); the GEMV tests under the ring; llama-3-8b q4 logits under the ring twice, eager,
# without PDL and per K / segment count (bisecting the difference: a race if eager or no-PDL runs agree);
# batch-1 with KILN_CUDA_STEP_STATS=1 (host issue / GPU wait a step) off / ring / ring without the map cache.
# Package (carry ["build-lead"]): bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
call_synth_2l q4 l2q4
call_ring_tests
IDS=$(seq -s, 1 40)
call_wait l2q4
LG_TIMEOUT=25 call_logits /tmp/s/l2q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1"
call_wait q06q4 l8q4
for v in X=1 KILN_CUDA_GEMV_RING=1; do call_b1s l8q4 $v; call_b1s q06q4 $v; done
call_b1s l8q4 KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_NOCACHE=1
L=/tmp/s/l8q4
LG_TIMEOUT=30 call_logits $L "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GRAPH=0" \
  "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_PDL=0" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_K=4096" "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_K=14336" \
  "kiln KILN_CUDA_GEMV_RING=1,KILN_CUDA_GEMV_RING_NSEG=1" "kiln KILN_CUDA_GRAPH=0"
for v in X=1 KILN_CUDA_GEMV_RING=1; do call_b1s l8q4 $v; call_b1s q06q4 $v; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
