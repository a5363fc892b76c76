#!/bin/bash
# call_s52a.sh — session 52, first call: the whole CUDA suite at main (session 51's test_row_views and the widening
# review refactor had never run on a device) and the issue table (combined.sh: copy / GEMM ceilings, batch-1 decode and
# 2048-token prefill of llama-3-8b and qwen3-0.6b at q4 and bf16, llama-3-8b q4 through the engine at c=1 and 64).
P=${1:?package}
MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,64" bash bench/cuda/combined.sh "$P"
