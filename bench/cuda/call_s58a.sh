#!/bin/bash
# call_s58a.sh — the ring GEMV after session 57's slot-tag fix, first thing on a device (~150 s): the GEMV tests with
# the ring on (bitwise gemv_tc_kernel; 45 s cap: session 57's race hung them), batch-1 decode ring off / on for
# qwen3-0.6b q4 and llama-3-8b q4, logits md5 off / on for both (bitwise through the model), a second round if time
# allows. Package (carry ["build-lead"]): bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels &&
#   PACK_BINS="kiln test_cuda_kernels" bash bench/cuda/pack.sh /work/cb/s26/b build-lead
P=${1:-build-lead}
. bench/cuda/call_lib.sh
call_unpack $P/kiln-cuda.tar.xz
call_synth q4 q06q4 l8q4
KILN_CUDA_TEST_GEMV_ONLY=1 KILN_CUDA_GEMV_RING=1 timeout 45 /tmp/k/test_cuda_kernels > $OUT/t_ring.log 2>&1
RC=$?
echo "ring rc=$RC at $(el) s $(tail -1 $OUT/t_ring.log)" >> $S
grep -i "fail\|# gemv" $OUT/t_ring.log | head >> $S
call_wait q06q4 l8q4
R=KILN_CUDA_GEMV_RING=1
[ $RC = 124 ] && R=X=2 # a hang again: the ring's runs would each wait out their limit — baselines only
for v in X=1 $R; do call_b1 q06q4 kiln $v; call_b1 l8q4 kiln $v; done
IDS=$(seq -s, 1 40)
LG_TIMEOUT=25 call_logits /tmp/s/q06q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
LG_TIMEOUT=25 call_logits /tmp/s/l8q4 "kiln X=1" "kiln KILN_CUDA_GEMV_RING=1"
if [ $(el) -lt 120 ]; then for v in X=1 $R; do call_b1 q06q4 kiln $v; call_b1 l8q4 kiln $v; done; fi
# the ring's shared-memory budget (slots) if the rest went well: 60 KB, 150 KB (one block an SM), 220 KB
if [ $RC = 0 ] && [ $(el) -lt 200 ]; then for b in 60000 150000 220000; do call_b1 l8q4 kiln "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_SMEM=$b"; call_b1 q06q4 kiln "KILN_CUDA_GEMV_RING=1 KILN_CUDA_GEMV_RING_SMEM=$b"; done; fi
echo "done at $(el) s" >> $S
cat $S; cat $OUT/bench.txt
