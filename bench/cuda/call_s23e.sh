#!/bin/bash
# call_s23e.sh — session 23, call 5: the grouped MoE GEMM's tile size and blocks per SM
# (KILN_CUDA_MOE_BN, KILN_CUDA_MOE_MINB) and delta_seq_kernel's shared-memory chunks: the MoE/hybrid
# tests (default, and with MINB=2), test_cuda_hybrid, ncu of the moe prefill step per kernel, prefill
# and c=64 A/Bs on the qwen3.5-moe-35b q4 synth (4 layers), qwen3.5-2b bf16 prefill.
#   run: bash bench/cuda/call_s23e.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1
  /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1; touch /tmp/s/moe4q4.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
call_t1 moe2 KILN_CUDA_TEST_MOE_ONLY=1 KILN_CUDA_MOE_MINB=2
timeout 300 /tmp/k/test_cuda_hybrid > /tmp/hy.log 2>&1; echo "test_cuda_hybrid rc=$? $(tail -1 /tmp/hy.log)" >> "$S"; grep -i fail /tmp/hy.log | head -5 >> "$S"
while [ ! -f /tmp/s/moe4q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 200 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu.csv > $OUT/ncu_prefill.txt 2>&1
grep mg_gemm /tmp/ncu.csv | head -3 | cut -c1-300 >> $OUT/ncu_prefill.txt
B=$OUT/bench.txt
for v in KILN_X=1 KILN_CUDA_MOE_BN=32 KILN_CUDA_MOE_BN=128 KILN_CUDA_MOE_MINB=2 "KILN_CUDA_MOE_MINB=2 KILN_CUDA_MOE_BN=32" KILN_X=1; do
  echo "== $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
done
for v in KILN_X=1 KILN_CUDA_MOE_MINB=2 KILN_CUDA_MOE_BN=64 KILN_X=1; do
  echo "== c64 $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --concurrency 64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null | tail -1 >> $B
done
for v in KILN_X=1 KILN_CUDA_DELTA=old KILN_X=1; do
  echo "== q352bf16 $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
done
echo "bench done at $(el) s" >> "$S"
cat $S
