#!/bin/bash
# call_s42f.sh — session 42, call 6: the convert launch's grid (qd_grid: up to 8 blocks an SM) against 4 and 2 an SM
# (KILN_CUDA_QDEQ_GRID=528 / 264 on the H100's 132 SMs): a thread's fixed instructions against its words — ncu time and
# instructions of the convert launches, prefill at 2048 alternating.   kiln packed (31a0681)
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4
call_wait q06q4
for v in X=1 KILN_CUDA_QDEQ_GRID=528 KILN_CUDA_QDEQ_GRID=264; do
  env $v timeout 100 ncu --metrics gpu__time_duration.sum,smsp__inst_executed.sum -k regex:qd_convert_multi --csv /tmp/k/kiln bench /tmp/s/q06q4 --backend cuda \
    --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/nc.csv 2>/dev/null
  python3 bench/cuda/ncu_launches.py "$v" >> "$S"
done
call_prefill_ab q06q4 2048 X=1 KILN_CUDA_QDEQ_GRID=528 KILN_CUDA_QDEQ_GRID=264 X=1 KILN_CUDA_QDEQ_GRID=528 KILN_CUDA_QDEQ_GRID=264
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cat "$S" $OUT/bench.txt
