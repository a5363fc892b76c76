#!/bin/bash
# call_s22f.sh — session 22, call 6: the final tree (v8 the 8-bit default too) — every CUDA test at default
# settings and llama-3-8b q8 at c=1 and c=64 (combined.sh).
#   run: bash bench/cuda/call_s22f.sh PKG
P=${1:?package}
MODELS="" VARIANTS="" CONC_ENV="KILN_CUDA_STEP_STATS=64" CONC="l8q8:1,64" bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
tail -12 $OUT/summary.txt
