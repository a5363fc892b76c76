#!/bin/bash
# call_s24b.sh — session 24, call 2: the chunk kernel at 8·CH threads (K and Q rows on separate
# threads, T/PT waited for at step 2 only) and the prep kernel's log-decay sum from shared memory:
# the MoE/hybrid subset (delta chunk tests print their errors), test_cuda_hybrid, 2048-token
# prefill A/B against KILN_CUDA_DELTA=seq, ncu per kernel (qwen3.5-2b) and ncu sections of one
# delta_chunk_kernel / delta_chunk_prep_kernel launch (where their time goes).
#   run: bash bench/cuda/call_s24b.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1
  /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1; touch /tmp/s/synth.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
grep "chunk form" /tmp/t_moe.log | head -12 >> "$S"
call_tbin test_cuda_hybrid
grep "qwen3_5-tiny \|qwen3_next" /tmp/test_cuda_hybrid.log | head -4 >> "$S"
while [ ! -f /tmp/s/synth.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
B=$OUT/bench.txt
for m in q352bf16 moe4q4; do
  for v in KILN_X=1 KILN_CUDA_DELTA=seq KILN_X=1; do
    echo "== $m $v" >> $B
    env $v timeout 100 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
  done
done
echo "bench done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu.csv > $OUT/ncu.txt 2>&1
KILN_CUDA_GRAPH=0 timeout 150 ncu --section SpeedOfLight --section Occupancy --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  -k regex:delta_chunk -c 2 /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > $OUT/ncu_sections.txt 2>&1
echo "ncu done at $(el) s" >> "$S"
cat $S
