#!/bin/bash
# call_s56c.sh — the ring GEMV (matmul_gemv_tc.cu gemv_tcr_kernel, KILN_CUDA_GEMV_RING=1) on a device for the first
# time, and bench/cuda/stream_chain.cu. Package (carry ["build-lead"]):
#   bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead &&
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o build-lead/stream_chain bench/cuda/stream_chain.cu
# 1. the GEMV tests with the ring on (test_gemv_ring: bitwise gemv_tc_kernel; test_gemv_tcm's one-token rows), while
#    llama-3-8b q4 and qwen3-0.6b q4 are written; 2. stream_chain on both shapes; 3. batch-1 decode tok/s ring off / on;
#    4. qwen3-0.6b q4 logits md5 ring off / on (bitwise through the model); 5. llama-3-8b q4 on / off again.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
call_t1 gemv_ring KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1
grep "# gemv" /tmp/t_gemv_ring.log >> "$S"
echo "tests done at $(el) s" >> "$S"
for m in llama qwen; do
  timeout 100 $P/stream_chain $m 4 6 8 13 > $OUT/chain_$m.txt 2>&1
  echo "== stream_chain $m rc=$?" >> "$S"; cat $OUT/chain_$m.txt >> "$S"
done
call_wait q06q4
call_b1 q06q4 kiln X=1
call_b1 q06q4 kiln KILN_CUDA_GEMV_RING=1
echo "q06 done at $(el) s" >> "$S"
call_wait l8q4
call_b1 l8q4 kiln X=1
call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1
call_b1 l8q4 kiln X=1
call_b1 l8q4 kiln KILN_CUDA_GEMV_RING=1
IDS=$(seq -s, 1 40)
call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
echo "done at $(el) s" >> "$S"
cat "$S"; cat $OUT/bench.txt
