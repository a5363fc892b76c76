#!/bin/bash
# call_s42a.sh — session 42, call 1: the whole CUDA suite at ea92208 with qd_att16.patch + qd_batch.patch applied (both
# opt-in, so the defaults are main's code; session 41's review commits had not run on the device), then call_att16.sh's
# measurements of the two patches.   all test binaries packed; run: bash bench/cuda/call_s42a.sh PKG
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
( timeout 300 /tmp/k/test_cuda_kernels > /tmp/tk.log 2>&1; echo "test_cuda_kernels rc=$? $(tail -1 /tmp/tk.log) (at $(el) s)" > /tmp/tk.sum
  grep -i fail /tmp/tk.log | head -10 >> /tmp/tk.sum ) &
tk=$!
call_tbin test_cuda_hybrid test_cuda_parity test_cuda_sample
wait $tk; cat /tmp/tk.sum >> "$S"
echo "suite done at $(el) s" >> "$S"
for v in X=1 KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1; do
  env $v timeout 200 /tmp/k/test_cuda_shapes > /tmp/shp.log 2>&1
  echo "shapes $v rc=$? $(tail -1 /tmp/shp.log) (at $(el) s)" >> "$S"; grep -i "fail" /tmp/shp.log | head -6 >> "$S"
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
call_prefill_ab "q06q4 l8q4" 2048 X=1 KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1 "KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1" X=1 "KILN_CUDA_QD_ATT16=1 KILN_CUDA_QD_BATCH=1"
nvidia-smi --query-gpu=name --format=csv,noheader >> "$S"
cat "$S" $OUT/bench.txt
