#!/bin/bash
# call_s24a.sh — session 24, call 1: session 23's review refactors (not run on the device then: the
# MoE/hybrid subset, the prefill-matmul subset, the wgmma subset, test_cuda_hybrid) and the gated
# delta rule's chunk form (deltanet.cu: its tests are in the MoE/hybrid subset), then 2048-token
# prefill of qwen3.5-2b bf16 and the qwen3.5-moe-35b q4 synth (4 layers) with the chunk form
# against KILN_CUDA_DELTA=seq (the token-by-token prefill form), and ncu of the delta kernels.
#   run: bash bench/cuda/call_s24a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1
  /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1; touch /tmp/s/synth.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
grep "chunk form\|gated_delta" /tmp/t_moe.log | head -20 >> "$S"
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
call_tbin test_cuda_hybrid
grep "qwen3_5\|qwen3_next" /tmp/test_cuda_hybrid.log | head -12 >> "$S"
while [ ! -f /tmp/s/synth.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
B=$OUT/bench.txt
for m in q352bf16 moe4q4; do
  for v in KILN_X=1 KILN_CUDA_DELTA=seq KILN_X=1 KILN_CUDA_DELTA=seq; do
    echo "== $m $v" >> $B
    env $v timeout 100 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
  done
done
echo "bench done at $(el) s" >> "$S"
for v in KILN_X=1 KILN_CUDA_DELTA=seq; do
  KILN_CUDA_GRAPH=0 env $v timeout 120 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
  echo "== ncu q352bf16 $v" >> $OUT/ncu.txt
  python3 bench/cuda/ncu_sum.py /tmp/ncu.csv >> $OUT/ncu.txt 2>&1
done
echo "ncu done at $(el) s" >> "$S"
cat $S
