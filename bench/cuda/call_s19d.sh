#!/bin/bash
# call_s19d.sh — session 19: why the batch-1 decode attention takes ~14 µs for 8.4 MB. ncu's detail sections
# (speed of light, launch, occupancy, warp states, scheduler) of attn_dec_mma_kernel in one decode step of a
# 2-layer qwen3-0.6b bf16 synth at a 2048-token context, per ATTN_ENV entry ("-" = defaults), then
# combined.sh's batch-1 benches (MODELS/VARIANTS from the caller).
#   run: ATTN_ENV="- KILN_CUDA_ATTN_CLUSTER=8" MODELS=... VARIANTS=... bash bench/cuda/call_s19d.sh PKG
P=${1:?package}
mkdir -p /tmp/k /tmp/s && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k/kiln
$K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q06l2bf16 > /tmp/s/syn-q06l2.log 2>&1
i=0
for v in ${ATTN_ENV:--}; do
  i=$((i + 1)); e=""; [ "$v" != - ] && e=$(echo "$v" | tr , ' ')
  env $e KILN_CUDA_GRAPH=0 timeout 200 ncu --clock-control none --cache-control none -k regex:attn_dec_mma -s 2 -c 1 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis \
    $K bench /tmp/s/q06l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 3 --runs 1 --warmup-tokens 0 > /tmp/ncud_$i.txt 2> /tmp/ncud_$i.err
  { echo "# [$v] rc=$?"; grep -v "^==PROF==" /tmp/ncud_$i.txt | grep -E "^\s+[A-Z].*\s[0-9.,]+\s*$|attn_dec|Section|OPT|Stall|stall" | head -120; } > "$OUT/ncud_$i.txt"
done
export TESTS=" "
bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
tail -30 "$OUT/summary.txt"
