#!/bin/bash
# call_s55a.sh — superseded by call_s55b.sh, which session 55 ran instead (this one never ran; kept as the record of
# session 54's plan). For the next session's first device call (written in session 54): everything still open in
# one start, since starts are scarce — session 54's GEMV warps-per-tile A/B (call_s54c.sh: the GEMV test subset under
# KILN_CUDA_GEMV_TC_S8K=4096 and KILN_CUDA_GEMV_TC_S8R=8192, batch-1 decode alternating, their traces; ~100 s), then
# the issue table without the tests (combined.sh: probe, batch-1 decode / 2048-token prefill of llama-3-8b and
# qwen3-0.6b at q4 and bf16, llama-3-8b q4 through the engine at c=1 and 64; ~60 s) — the H200 re-measure if the
# start gives an H200. Package: bash bench/cuda/build_here.sh /work/cb/s26 kiln test_cuda_kernels kiln-cuda-probe &&
# PACK_BINS="kiln test_cuda_kernels kiln-cuda-probe" bash bench/cuda/pack.sh /work/cb/s26/b build-lead; carry ["build-lead"].
P=${1:?package}
bash bench/cuda/call_s54c.sh "$P"
cp "$OUT/pre.txt" "$OUT/s54c.txt" 2>/dev/null
TESTS=" " MODELS="l8q4 l8bf16 q06q4 q06bf16" CONC="l8q4:1,64" bash bench/cuda/combined.sh "$P"
