#!/bin/bash
# call_s59j.sh — session 59's final ring GEMV (quad slots, maps in device memory, launched plain unless
# KILN_CUDA_GEMV_RING_PDL=1): the GEMV tests with the ring on (its stress test at 512 repetitions, half by PDL), the
# PDL chains, logits md5 ring off / on (llama-3-8b q4 ×3, qwen3-0.6b q4), batch-1 off / ring. Package as call_s59a.sh.
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1 timeout 60 /tmp/k/test_cuda_kernels > $OUT/t_ring.log 2>&1
echo "gemv tests, ring rc=$? at $(el) s $(tail -1 $OUT/t_ring.log)" >> $S
KILN_CUDA_TEST_RING_ONLY=1 KILN_CUDA_TEST_RING_STRESS=512 timeout 60 /tmp/k/test_cuda_kernels > /tmp/t.log 2>&1
echo "ring tests, 512 reps rc=$? $(tail -1 /tmp/t.log)" >> $S
grep -i "fail\|# gemv\|stress" $OUT/t_ring.log /tmp/t.log | head >> $S
call_wait q06q4 l8q4
IDS=$(seq -s, 1 40)
LG_TIMEOUT=30 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1" "kiln KILN_CUDA_GEMV_RING=1"
LG_TIMEOUT=30 call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
for v in X=1 KILN_CUDA_GEMV_RING=1 X=1 KILN_CUDA_GEMV_RING=1; do call_b1 l8q4 kiln $v; call_b1 q06q4 kiln $v; done
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
