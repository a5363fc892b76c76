#!/bin/bash
# call_s64a.sh — (session 64) attn_prefetch: the q/k/v GEMV asks L2 for the coming decode attention's K/V before its
# PDL wait (kv_prefetch.cuh). The tensor-core decode tests (test_kv_prefetch among them: the layer bitwise with and
# without the hint), batch-1 A/B of the default (off) against KILN_CUDA_KV_PF=1 and =2 (an evict_last policy) in
# alternating rounds, logits md5 with and without it (llama-3-8b q4: the model's own path), and the decode timeline
# of each. Package (the timeline build: its stamps do nothing unless KILN_CUDA_TIMELINE names a file):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s62t/b build-s64a      (carry ["build-s64a"])
# (The hint measured 5-9 % slower in session 64's call of call_s64b.sh and left main: both scripts now need a tree with
# bench/cuda/kv_prefetch_s64.patch applied, e.g. PATCH=bench/cuda/kv_prefetch_s64.patch in build_here.sh.)
P=${1:-build-s64a}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
T1_TIMEOUT=100 call_t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
grep "kv prefetch" /tmp/t_attn_dec.log | head -8 >> "$S"
call_wait l8q4 q06q4
for r in 1 2; do
  for m in l8q4 q06q4; do
    call_b1s $m X=1
    call_b1s $m KILN_CUDA_KV_PF=1
    call_b1s $m KILN_CUDA_KV_PF=2
  done
done
echo "b1 done at $(el) s" >> "$S"
call_logits_md5 l8q4 1 X=1 KILN_CUDA_KV_PF=1 KILN_CUDA_KV_PF=2
TL_TAIL=45
for m in l8q4 q06q4; do
  call_tl $m pf0 X=1
  call_tl $m pf1 KILN_CUDA_KV_PF=1
done
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
