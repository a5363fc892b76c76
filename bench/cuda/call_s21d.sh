#!/bin/bash
# call_s21d.sh — session 21's final binary (HEAD's src): the test subsets that cover what changed
# (the fused-GEMV tests with test_gemv_mlp, the batch-1 GEMV tests, the decode attention tests),
# parity, hybrid, sample; then main's batch-1 numbers (combined.sh, no tests) if time is left.
#   run: bash bench/cuda/call_s21d.sh PKG
P=${1:?package}
mkdir -p /tmp/k && tar xJf "$P" -C /tmp/k && export LD_LIBRARY_PATH=/tmp/k/lib
S=$OUT/pre.txt
t1() { local n=$1; shift; env "$@" timeout 150 /tmp/k/test_cuda_kernels > /tmp/t_$n.log 2>&1; echo "$n rc=$? $(tail -1 /tmp/t_$n.log)" >> $S; grep -i "fail\|gemv mlp" /tmp/t_$n.log | head -5 >> $S; }
t1 fused KILN_CUDA_TEST_FUSED_GEMV_ONLY=1
t1 gemv KILN_CUDA_TEST_GEMV_ONLY=1
t1 attn_dec KILN_CUDA_TEST_ATTN_ONLY=dec
for t in test_cuda_parity test_cuda_hybrid test_cuda_sample; do
  timeout 100 /tmp/k/$t > /tmp/$t.log 2>&1; echo "$t rc=$? $(tail -1 /tmp/$t.log)" >> $S; grep FAIL /tmp/$t.log | head -3 >> $S
done
cat $S
TESTS=" " MODELS="q06bf16 q06q4 l8bf16 l8q4" CONC="" VARIANTS="" bash bench/cuda/combined.sh "$P" > /dev/null 2>&1
cat $S >> $OUT/summary.txt
