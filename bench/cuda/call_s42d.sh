#!/bin/bash
# call_s42d.sh — session 42, call 4: where a qwen3-0.6b q4 2048-token prefill's GPU time goes at the new defaults
# (ncu per kernel, summed), and why the weights' f16 conversion runs at about half the copy rate (ncu --set full of
# two qd_convert_multi_kernel launches: memory throughput, occupancy, stall reasons).   kiln packed
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 q06q4
call_wait q06q4
call_ncu_prefill q06q4 X=1
timeout 200 ncu --set full -k regex:qd_convert_multi_kernel --launch-skip 40 --launch-count 2 /tmp/k/kiln bench /tmp/s/q06q4 \
  --backend cuda --prompt-tokens 2048 --gen-tokens 2 --runs 1 > /tmp/ncu_conv.txt 2>&1
echo "ncu full rc=$?" >> "$S"
grep -v "^==PROF==" /tmp/ncu_conv.txt | grep -E "qd_convert|Duration|Throughput|DRAM|L2|Memory|Occupancy|Registers|Block Size|Grid Size|Waves|Stall|Warp Cycles|Eligible|Issued|Achieved|Theoretical|Shared|Executed Ipc|L1|Elapsed|SM Busy|Mem Busy|Max Bandwidth|Bytes" | head -120 > $OUT/ncu_conv.txt
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cat "$S"; head -45 $OUT/ncu.txt; head -80 $OUT/ncu_conv.txt
