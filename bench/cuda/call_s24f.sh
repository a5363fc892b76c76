#!/bin/bash
# call_s24f.sh — session 24, call 6: where a hybrid decode token goes — ncu per kernel of short runs
# (16-token prompt, 4 generated: the decode steps dominate) of qwen3.5-2b bf16 and the qwen3.5-moe-35b
# q4 synth (4 layers), and their batch-1 decode rate at a 2048-token context.
#   run: bash bench/cuda/call_s24f.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
/tmp/k/kiln synth --preset qwen3.5-2b --dtype bf16 --out /tmp/s/q352bf16 > /tmp/s/synth-2b.log 2>&1
/tmp/k/kiln synth --preset qwen3.5-moe-35b --dtype q4 --layers 4 --out /tmp/s/moe4q4 > /tmp/s/synth-q4.log 2>&1
echo "synth done at $(el) s" >> "$S"
for m in q352bf16 moe4q4; do
  KILN_CUDA_GRAPH=0 timeout 150 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 16 --gen-tokens 4 --runs 1 > /tmp/ncu_$m.csv 2>/tmp/ncu.err
  echo "== $m (16-token prompt, 4 generated; ncu clock)" >> $OUT/ncu_decode.txt
  python3 bench/cuda/ncu_sum.py /tmp/ncu_$m.csv >> $OUT/ncu_decode.txt 2>&1
  cp /tmp/ncu_$m.csv $OUT/ 2>/dev/null
  timeout 100 /tmp/k/kiln bench /tmp/s/$m --backend cuda --prompt-tokens 2048 --gen-tokens 64 --runs 2 --json 2>/dev/null | tail -1 >> $OUT/bench.txt
done
echo "done at $(el) s" >> "$S"
cat $S
