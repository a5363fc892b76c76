#!/bin/bash
# call_s21c.sh — session 21: the one-launch batch-1 MLP (matmul_gemv.cu gemvp_mlp_kernel). Its test and
# the fused-GEMV tests (KILN_CUDA_TEST_FUSED_GEMV_ONLY), parity, then batch-1 A/B rounds on qwen3-0.6b and
# llama-3-8b bf16: default, KILN_CUDA_MLP_PERSIST=0 (the separate ops), the poll pause off, fewer blocks.
#   run: bash bench/cuda/call_s21c.sh PKG
P=${1:?package}
mkdir -p /tmp/k && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
KILN_CUDA_TEST_FUSED_GEMV_ONLY=1 timeout 120 /tmp/k/test_cuda_kernels > /tmp/f.log 2>&1
echo "test_cuda_kernels FUSED_GEMV_ONLY rc=$? $(tail -1 /tmp/f.log)" >> $OUT/pre.txt; grep -i "fail\|gemv mlp" /tmp/f.log | head -12 >> $OUT/pre.txt
timeout 100 /tmp/k/test_cuda_parity > /tmp/p.log 2>&1; echo "parity rc=$? $(tail -1 /tmp/p.log)" >> $OUT/pre.txt; grep FAIL /tmp/p.log | head -3 >> $OUT/pre.txt
timeout 100 /tmp/k/test_cuda_hybrid > /tmp/h.log 2>&1; echo "hybrid rc=$? $(tail -1 /tmp/h.log)" >> $OUT/pre.txt
Q="KILN_CUDA_MLP_PERSIST=0:q06bf16 KILN_X=0:q06bf16 KILN_CUDA_MLP_SPIN_NS=0:q06bf16 KILN_CUDA_MLP_BPS=4:q06bf16 KILN_CUDA_MLP_BPS=2:q06bf16"
L="KILN_CUDA_MLP_PERSIST=0:l8bf16 KILN_X=0:l8bf16 KILN_CUDA_MLP_SPIN_NS=0:l8bf16 KILN_CUDA_MLP_BPS=4:l8bf16"
TESTS=" " MODELS="" CONC="" VARIANTS="$Q $Q $L" bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $OUT/pre.txt >> $OUT/summary.txt
