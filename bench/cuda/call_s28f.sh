#!/bin/bash
# call_s28f.sh — session 28, call 6: where a 64-row llama-3-8b q4 decode step goes now (this tree: calls 3 and 5's
# changes): ncu per-kernel times (graphs off, serialized, clocks not locked) of a 2-layer synth through the engine at
# the issue protocol's shape (64 requests, 128-token prompts), the steps of 64 rows only.
#   run: bash bench/cuda/call_s28f.sh PKG   (PACK_BINS="kiln")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
/tmp/k/kiln synth --preset llama-3-8b --dtype q4 --layers 2 --out /tmp/s/l2q4 > /dev/null 2>&1
KILN_CUDA_GRAPH=0 timeout 200 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,launch__grid_size --csv \
  /tmp/k/kiln bench /tmp/s/l2q4 --backend cuda --concurrency 64 --prompt-tokens 128 --gen-tokens 4 --max-batch 64 --kv-cache-gb 4 \
  --warmup-tokens 0 > /tmp/ncu64.csv 2> /tmp/ncu64.err
echo "ncu rc=$? at $(el) s" >> "$S"
xz -9 -c /tmp/ncu64.csv > $OUT/ncu64.csv.xz
tail -3 /tmp/ncu64.err >> "$S"
cat "$S"
