#!/bin/bash
# call_s28a.sh — session 28, call 1. kiln-base = c291234 (session 27's last commit; its host-side launch refactor
# of the 64-token chain never ran on the device), kiln = this tree: (1) the decode attention's final cluster
# barrier in its aligned release/acquire form instead of cooperative_groups' sync(); (2) KILN_CUDA_QWG_ROWS=256
# (opt-in): single-weight 4-bit 64-token matmuls in 256-row blocks (session 27's patch, 4 consumer warpgroups).
#   run: bash bench/cuda/call_s28a.sh PKG   (PACK_BINS="kiln kiln-base test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
call_synth bf16 l8bf16
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_t1 qwg256 KILN_CUDA_TEST_QWG_ONLY=1 KILN_CUDA_QWG_ROWS=256
call_t1 qwgm KILN_CUDA_TEST_QWG_MULTI_ONLY=1
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=dec
call_t1 rope KILN_CUDA_TEST_NORM_ROPE_ONLY=1
KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | cut -c1-100 >> "$S"
KILN_CUDA_QWG_ROWS=256 KILN_CUDA_TEST_QWG_BENCH=1 timeout 120 /tmp/k/test_cuda_kernels 2>&1 | grep "qwg bench" | grep "v8 mc1 hslab1 probe=0" | cut -c1-100 | sed "s/^/R256 /" >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8bf16.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
call_logits_chunks "/tmp/s/l8q4" "64" kiln-base kiln
KILN_CUDA_QWG_ROWS=256 call_logits_chunks "/tmp/s/l8q4" "64" kiln
IDS=$(seq -s, 100 123) call_logits /tmp/s/l8bf16 "kiln-base X=1" "kiln X=1"
for i in 1 2 3; do
  call_b1 l8bf16 kiln-base X=1
  call_b1 l8bf16 kiln X=1
done
call_b1 l8q4 kiln-base X=1
call_b1 l8q4 kiln X=1
echo "b1 done at $(el) s" >> "$S"
for i in 1 2; do
  call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
  call_conc128 l8q4 kiln KILN_CUDA_QWG_ROWS=256 "--max-batch 128 --kv-cache-gb 16"
done
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
