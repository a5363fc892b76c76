#!/bin/bash
# call_s41d.sh — session 41, call 4: down's weight converted in gate/up's convert launch (one launch a layer less) —
# the prefill-matmul subset (test_qd_fused with KILN_CUDA_QD_DOWN1=0 too), `kiln logits` md5 default / DOWN1=0 /
# QD_FUSE=0, prefill tok/s at 2048 default vs KILN_CUDA_QD_DOWN1=0 vs KILN_CUDA_QD_FUSE=0 (qwen3-0.6b q4, llama-3-8b q4).
#   PACK_BINS="kiln test_cuda_kernels"; run: bash bench/cuda/call_s41d.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
grep "qd fused\|lt fused\|qdeq f16:" /tmp/t_qgemm.log >> "$S"
call_wait l8q4 q06q4
for m in q06q4 l8q4; do
  for v in X=1 KILN_CUDA_QD_DOWN1=0 KILN_CUDA_QD_FUSE=0; do
    env $v timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 --out /tmp/lg.npy > /tmp/lg.log 2>&1
    echo "logits $m chunk 300 $v rc=$? $(md5sum < /tmp/lg.npy | cut -c1-12)" >> "$S"
  done
done
call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QD_DOWN1=0 KILN_CUDA_QD_FUSE=0 X=1 KILN_CUDA_QD_DOWN1=0
cat "$S" $OUT/bench.txt
