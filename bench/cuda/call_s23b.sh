#!/bin/bash
# call_s23b.sh — session 23, call 2: the MoE tests again (tolerances set from call 1), where a
# qwen3.5-moe-35b q4 prefill step goes now (ncu, kernels serialized), and the pair/grouped
# threshold (KILN_CUDA_MOE) at 1..8 concurrent rows.
#   run: bash bench/cuda/call_s23b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1; touch /tmp/s/moe4q4.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
grep "^# moe_experts grouped\|FAIL" /tmp/t_moe.log > $OUT/moe_test.txt
while [ ! -f /tmp/s/moe4q4.done ]; do sleep 1; done
KILN_CUDA_GRAPH=0 timeout 200 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu.csv > $OUT/ncu_prefill.txt 2>&1; tail -3 /tmp/ncu.err >> $OUT/ncu_prefill.txt
B=$OUT/bench.txt
for v in 0 1 2 4 8; do
  echo "== KILN_CUDA_MOE=$v" >> $B
  KILN_CUDA_MOE=$v timeout 100 /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --concurrency 1,2,4,8 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null | tail -1 >> $B
done
cat $S
