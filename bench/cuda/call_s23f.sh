#!/bin/bash
# call_s23f.sh — session 23, call 6: the tree with the grouped GEMM's tail tiles, two blocks an SM and
# the per-token combine: every CUDA test at default settings (test_cuda_kernels beside the other three),
# then ncu of the moe prefill step and A/Bs (KILN_CUDA_MOE_TAIL=0, KILN_CUDA_MOE_MINB=1) on the
# qwen3.5-moe-35b q4 synth (4 layers): prefill and c=1/64; qwen3.5-2b bf16 and gemma3-1b bf16 prefill.
#   run: bash bench/cuda/call_s23f.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
( /tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1
  /tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1
  /tmp/k/kiln synth --preset gemma3-1b --dtype bf16 --out /tmp/s/g31bf16 > /tmp/s/synth-g3.log 2>&1; touch /tmp/s/all.done ) &
( timeout 400 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1; echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log) (at $(el) s)" > /tmp/tk.sum; grep -i fail /tmp/tk.log | head -10 >> /tmp/tk.sum ) &
TK=$!
for t in test_cuda_hybrid test_cuda_parity test_cuda_sample; do
  timeout 300 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)" >> "$S"; grep -i "fail" /tmp/$t.log | grep -v kiln-tiny | head -8 >> "$S"
done
wait $TK; cat /tmp/tk.sum >> "$S"; grep "^# moe_experts grouped\|^# attention (tensor cores" /tmp/tk.log > $OUT/kernels_notes.txt
echo "tests done at $(el) s" >> "$S"
while [ ! -f /tmp/s/all.done ]; do sleep 1; done
KILN_CUDA_GRAPH=0 timeout 200 ncu --metrics gpu__time_duration.sum --csv /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --prompt-tokens 2048 --gen-tokens 1 --runs 1 > /tmp/ncu.csv 2>/tmp/ncu.err
python3 bench/cuda/ncu_sum.py /tmp/ncu.csv > $OUT/ncu_prefill.txt 2>&1
B=$OUT/bench.txt
for v in KILN_X=1 KILN_CUDA_MOE_TAIL=0 KILN_CUDA_MOE_MINB=1 KILN_X=1; do
  echo "== moe4q4 $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --prompt-tokens 2048 --gen-tokens 16 --runs 2 --json 2>/dev/null | tail -1 >> $B
done
for v in KILN_X=1 KILN_CUDA_MOE_MINB=1; do
  echo "== c moe4q4 $v" >> $B
  env $v timeout 100 /tmp/k/kiln bench /tmp/s/moe4q4 --backend cuda --concurrency 1,64 --prompt-tokens 128 --gen-tokens 64 --max-batch 64 --json 2>/dev/null | tail -1 >> $B
done
for m in q352bf16 g31bf16; do
  echo "== $m" >> $B
  timeout 100 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 32 --runs 2 --json 2>/dev/null | tail -1 >> $B
done
echo "bench done at $(el) s" >> "$S"
cat $S
