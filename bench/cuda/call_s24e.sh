#!/bin/bash
# call_s24e.sh — session 24, call 5: the tree with the delta rule's chunk form on tensor cores (the
# prep kernel's Grams and P·T on tensor cores too) and the windowed conv1d: every CUDA test at default
# settings, then 2048-token prefill A/Bs against KILN_CUDA_DELTA=seq (qwen3.5-2b bf16, the qwen3.5-moe-35b
# q4 synth at 4 layers), moe4q4 engine c=64 A/B, gemma3-1b bf16 prefill (no DeltaNet: a control), ncu
# per kernel of the qwen3.5-2b prefill step.
#   run: bash bench/cuda/call_s24e.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_full_tests
grep "chunk form" /tmp/tk.log > $OUT/kernels_notes.txt
B=$OUT/bench.txt
for m in q352bf16 moe4q4; do
  for v in KILN_X=1 KILN_CUDA_DELTA=seq KILN_X=1 KILN_CUDA_DELTA=seq; do
    echo "== $m $v" >> $B
    env $v timeout 100 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
  done
done
echo "== g31bf16" >> $B
timeout 100 /tmp/k/kiln bench /tmp/s/g31bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
for v in KILN_X=1 KILN_CUDA_DELTA=seq; do
  echo "== c64 moe4q4 $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --concurrency 64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null | tail -1 >> $B
done
echo "bench done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 120 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/q352bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu.csv > $OUT/ncu.txt 2>&1
echo "ncu done at $(el) s" >> "$S"
cat $S
