#!/bin/bash
# call_att16.sh — for bench/cuda/qd_att16.patch and bench/cuda/qd_batch.patch (written in session 41, compiled, NOT yet
# run; they apply together): o's x for MLX weights as the prefill attention's unscaled f16 output (opt-in
# KILN_CUDA_QD_ATT16=1) instead of a scan and a conversion of its f32 output; gate and up as one batched f16 GEMM (opt-in
# KILN_CUDA_QD_BATCH=1). Build with both applied, pack kiln test_cuda_kernels test_cuda_shapes; then:
#   run: bash bench/cuda/call_att16.sh PKG
# test_cuda_shapes with and without (every synth against the CPU at 1..300-token prompts), the attention tests, logits
# md5 and the largest difference against the scan path, prefill at 2048 on vs off.
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_t1 attn KILN_CUDA_TEST_ATTN_ONLY=mma
call_t1 qgemm KILN_CUDA_TEST_QGEMM_ONLY=1
for v in X=1 KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1; do
  env $v timeout 200 /tmp/k/test_cuda_shapes > /tmp/shp.log 2>&1
  echo "shapes $v rc=$? $(tail -1 /tmp/shp.log)" >> "$S"; grep -i "fail\|q4 *prompts" /tmp/shp.log | head -6 >> "$S"
done
call_wait l8q4 q06q4
for m in q06q4 l8q4; do
  for v in X=1 KILN_CUDA_QD_ATT16=1; do
    env $v timeout 90 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 609)" --chunk 300 --out /tmp/lg_$v.npy > /dev/null 2>&1
    echo "logits $m $v rc=$? $(md5sum < /tmp/lg_$v.npy | cut -c1-12)" >> "$S"
  done
  python3 -c "
import numpy as np; a=np.load('/tmp/lg_KILN_CUDA_QD_ATT16=1.npy'); b=np.load('/tmp/lg_X=1.npy')
d=np.abs(a.astype(np.float64)-b); print('logits $m att16 vs scan: max|diff| %.3g of max|logit| %.3g, argmax equal %d of %d' % (d.max(), np.abs(b).max(), (a.argmax(-1)==b.argmax(-1)).sum(), a.shape[0]))" >> "$S" 2>&1
done
call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1 "KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1" X=1
cat "$S" $OUT/bench.txt
