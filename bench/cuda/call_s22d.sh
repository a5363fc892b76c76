#!/bin/bash
# call_s22d.sh — session 22, call 4: the final tree (f16 slab default) — every CUDA test at default settings
# (test_cuda_kernels, parity, hybrid, sample), batch-1 on four checkpoints, and the c=64 ratios (combined.sh).
#   run: bash bench/cuda/call_s22d.sh PKG
P=${1:?package}
MODELS="l8bf16 l8q4 q06bf16 q06q4" VARIANTS="" CONC_ENV="KILN_CUDA_STEP_STATS=64" CONC="l8q4:1,64,1 q06q4:1,64" \
  bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
tail -30 $OUT/summary.txt
