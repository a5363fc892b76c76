#!/bin/bash
# call_s64b.sh — (session 64) what is pending on the device, in order of value, for one call of ≤ 9.5 min: the
# tensor-core decode tests (test_kv_prefetch among them), the batch-1 A/B of attn_prefetch (default off
# against KILN_CUDA_KV_PF=1 and =2, two rounds) and its logits md5, then the whole test_cuda_kernels (last whole run:
# session 55) with the time that is left (WHOLE_END: seconds since the start by which it must end, default 560), then
# the timeline of the hint if time remains. Package (the timeline build; carry ["build-s64a"]):
#   CMAKE_EXTRA="-DKILN_CUDA_TIMELINE=ON" bash bench/cuda/build_here.sh /work/cb/s62t kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s62t/b build-s64a
# (The hint measured 5-9 % slower in this call (session 64) and left main: the script now needs a tree with
# bench/cuda/kv_prefetch_s64.patch applied, e.g. PATCH=bench/cuda/kv_prefetch_s64.patch in build_here.sh.)
P=${1:-build-s64a}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 l8q4 q06q4
T1_TIMEOUT=100 call_t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
grep "kv prefetch" /tmp/t_attn_dec.log | head -8 >> "$S"
call_wait l8q4 q06q4
call_b1s_ab 2 "l8q4 q06q4" X=1 KILN_CUDA_KV_PF=1 KILN_CUDA_KV_PF=2
call_logits_md5 l8q4 1 X=1 KILN_CUDA_KV_PF=1 KILN_CUDA_KV_PF=2
left=$(( ${WHOLE_END:-560} - $(el) ))
echo "whole test_cuda_kernels with ${left} s at $(el) s" >> "$S"
[ $left -gt 30 ] && T1_TIMEOUT=$left call_t1 whole X=1
TL_TAIL=45
[ $(el) -lt 540 ] && call_tl l8q4 pf1 KILN_CUDA_KV_PF=1
echo "done at $(el) s" >> "$S"
cat $S; cat $OUT/bench.txt
