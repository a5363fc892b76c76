#!/bin/bash
# call_s27a.sh — session 27, call 1: the automatic KV cache (--kv-cache-gb auto, engine/kv_budget.c) on the H200,
# and where a 64-row llama-3-8b q4 step's time goes (issue 8's last concurrency line).
#   1. test_cuda_parity on this tree (the new backend op);
#   2. the issue table's concurrency protocol (128 + 128, --max-batch 128) at c=1 and c=64 with the cache left
#      to auto, then with --kv-cache-gb 16 (the protocol's flag): the engine's log lines and the step stats;
#   3. 16 requests of 8000-token prompts at once (16 x 8064 tokens = 16.5 GB of K/V: past 1 GB, the old default);
#   4. ncu per kernel of a 64-row step of a 2-layer llama-3-8b q4 (step_ncu.sh), and, where nsys exists, the
#      c=64 timeline's busy share and gaps (nsys_gaps.py).
#   run: bash bench/cuda/call_s27a.sh PKG   (PACK_BINS="kiln test_cuda_parity")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv >> "$S" 2>&1
echo "nsys: $(command -v nsys) ncu: $(command -v ncu)" >> "$S"
call_tbin test_cuda_parity
while [ ! -f /tmp/s/l8q4.done ]; do sleep 1; done
echo "synth done at $(el) s" >> "$S"
B="/tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 128 --gen-tokens 128 --max-batch 128 --json"
KILN_CUDA_STEP_STATS=64 timeout 150 $B --concurrency 1,64 > $OUT/auto.json 2> $OUT/auto.err; echo "auto rc=$? at $(el) s" >> "$S"
KILN_CUDA_STEP_STATS=64 timeout 150 $B --concurrency 1,64 --kv-cache-gb 16 > $OUT/gb16.json 2> $OUT/gb16.err; echo "gb16 rc=$? at $(el) s" >> "$S"
timeout 200 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 8000 --gen-tokens 64 --concurrency 16 --warmup-tokens 0 --json > $OUT/long.json 2> $OUT/long.err
echo "long rc=$? at $(el) s" >> "$S"
timeout 100 /tmp/k/kiln bench /tmp/s/l8q4 --backend cuda --prompt-tokens 8000 --gen-tokens 64 --concurrency 16 --warmup-tokens 0 --kv-cache-gb 1 --json > $OUT/long1.json 2> $OUT/long1.err
echo "long at 1 GB rc=$? at $(el) s" >> "$S"
if command -v nsys > /dev/null; then
  timeout 150 nsys profile --trace=cuda --cuda-graph-trace=node -o /tmp/c64 -f true $B --concurrency 64 --gen-tokens 64 > /tmp/nsys.log 2>&1
  echo "nsys rc=$? at $(el) s" >> "$S"
  timeout 120 nsys stats --report cuda_gpu_trace --format csv -o /tmp/c64 /tmp/c64.nsys-rep > /tmp/nsys_stats.log 2>&1
  ls /tmp/c64* >> "$S"
  python3 bench/cuda/nsys_gaps.py /tmp/c64_cuda_gpu_trace.csv 200 > $OUT/gaps.txt 2>&1
  python3 bench/cuda/nsys_gaps.py /tmp/c64_cuda_gpu_trace.csv 60 >> $OUT/gaps.txt 2>&1
  tail -5 /tmp/nsys.log >> $OUT/gaps.txt
fi
DTYPES="" PRE=0 L8DTYPES=q4 KDIR=/tmp/k bash bench/cuda/step_ncu.sh - > /dev/null 2>&1
echo "step_ncu rc=$? at $(el) s" >> "$S"
python3 bench/cuda/ncu_sum.py /tmp/ncu_l8dec64_q4.csv > $OUT/ncu_sum.txt 2>&1
echo "all done at $(el) s" >> "$S"
grep -h "KV cache\|KV blocks\|kiln cuda:" $OUT/*.err >> "$S"
cat "$S"
