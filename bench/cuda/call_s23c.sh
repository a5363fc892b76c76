#!/bin/bash
# call_s23c.sh — session 23, call 3: the gated delta rule's prefill form (delta_prep_kernel +
# delta_seq_kernel) and the MoE threshold default: the MoE/hybrid test subset, test_cuda_hybrid,
# test_cuda_parity; ncu of a qwen3.5-moe-35b q4 prefill step; prefill A/B KILN_CUDA_DELTA=old on
# that and on qwen3.5-2b bf16.
#   run: bash bench/cuda/call_s23c.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1; touch /tmp/s/moe4q4.done
  /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1; touch /tmp/s/q352bf16.done ) &
call_t1 moe KILN_CUDA_TEST_MOE_ONLY=1
grep "^# moe_experts grouped\|FAIL" /tmp/t_moe.log > $OUT/moe_test.txt
for t in test_cuda_hybrid test_cuda_parity; do
  timeout 300 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)" >> "$S"; grep -i "fail" /tmp/$t.log | grep -v kiln-tiny | head -8 >> "$S"
done
echo "tests done at $(el) s" >> "$S"
while [ ! -f /tmp/s/q352bf16.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
KILN_CUDA_GRAPH=0 timeout 200 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu.csv > $OUT/ncu_prefill.txt 2>&1
B=$OUT/bench.txt
for m in moe4q4 q352bf16; do for v in KILN_CUDA_DELTA=new KILN_CUDA_DELTA=old KILN_CUDA_DELTA=new; do
  echo "== $m $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 32 --runs 2 --json 2>/dev/null | tail -1 >> $B
done; done
echo "bench done at $(el) s" >> "$S"
cat $S
