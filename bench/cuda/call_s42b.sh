#!/bin/bash
# call_s42b.sh — session 42, call 2: the tree with o's x as the attention's f16 form and gate/up as one batched GEMM
# made the defaults (KILN_CUDA_QD_ATT16 / KILN_CUDA_QD_BATCH, =0: off): the whole suite (test_qd_att16 new) and the
# issue table on whatever GPU comes, qwen3-0.6b q4 again with both off in the same run (combined.sh's VARIANTS).
#   all test binaries + kiln-cuda-probe packed; run: bash bench/cuda/call_s42b.sh PKG
P=${1:?package}
MODELS="l8q4 l8bf16 q06q4 q06bf16" VARIANTS="KILN_CUDA_QD_ATT16=0,KILN_CUDA_QD_BATCH=0:q06q4 KILN_CUDA_QD_ATT16=0,KILN_CUDA_QD_BATCH=0:l8q4" \
  CONC="l8q4:1,64" bash bench/cuda/combined.sh "$P"
grep -h "qd att16\|qd fused\|qd rms_mlp\|FAIL" /tmp/test_cuda_kernels.log 2>/dev/null | head -12 >> $OUT/summary.txt
cat $OUT/summary.txt
