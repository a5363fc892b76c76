#!/bin/bash
# call_s19e.sh — session 19: the batch-1 decode attention under ncu's full set (stall reasons per issued
# instruction, source hot spots by SASS line), one launch in the decode step of a 2-layer qwen3-0.6b bf16 synth
# at a 2048-token context (L2 not flushed, graphs off). For whoever rewrites attn_dec_mma_kernel.
#   run: bash bench/cuda/call_s19e.sh PKG   (results: $OUT/attn_full.txt, attn_src.csv)
P=${1:?package}
mkdir -p /tmp/k /tmp/s && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
K=/tmp/k/kiln
$K synth --arch qwen3 --preset qwen3-0.6b --dtype bf16 --layers 2 --out /tmp/s/q06l2bf16 > /tmp/s/syn.log 2>&1
KILN_CUDA_GRAPH=0 timeout 300 ncu --clock-control none --cache-control none -k regex:attn_dec_mma -s 2 -c 1 --set full \
  --import-source no -o /tmp/attn $K bench /tmp/s/q06l2bf16 --backend cuda --prompt-tokens 2048 --gen-tokens 3 --runs 1 \
  --warmup-tokens 0 > /tmp/ncu.log 2>&1
echo "ncu rc=$?" > "$OUT/attn_full.txt"
ncu -i /tmp/attn.ncu-rep --page details --print-details all >> "$OUT/attn_full.txt" 2>&1
ncu -i /tmp/attn.ncu-rep --page source --csv --print-source sass > /tmp/src.csv 2>&1
head -c 3000000 /tmp/src.csv > "$OUT/attn_src.csv"
tail -5 /tmp/ncu.log >> "$OUT/attn_full.txt"
wc -c "$OUT"/*
