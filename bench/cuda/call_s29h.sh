#!/bin/bash
# call_s29h.sh — written in session 29 for the next session (NOT run: the device budget was spent): the opt-in
# KILN_CUDA_QWG_SLICE=MAXT (matmul.cu cuda_qwg_slices: MLX 4/8-bit matmuls of 65..MAXT tokens as ⌈T / 64⌉ calls of the
# 9..64-token wgmma path). The QWG test subset (with the new test_qwg_slice), model-level logits with the slices
# against the default (max |Δ| / max |logit| per model: another rounding of x, expected ~1e-3), prefill tok/s at 65..320
# prompt tokens with and without, and the engine at c=1 (its 128-token prompt takes the slices).
#   run: bash bench/cuda/call_s29h.sh PKG   (PACK_BINS="kiln test_cuda_kernels")
P=${1:?package}
. bench/cuda/call_lib.sh
call_unpack "$P"
call_synth q4 l8q4 q06q4
call_synth q8 l8q8
call_t1 qwg KILN_CUDA_TEST_QWG_ONLY=1
grep "qwg slice" /tmp/t_qwg.log >> "$S"
while [ ! -f /tmp/s/l8q4.done ] || [ ! -f /tmp/s/l8q8.done ] || [ ! -f /tmp/s/q06q4.done ]; do sleep 1; done
for m in l8q4 l8q8 q06q4; do
  timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 209)" --chunk 200 --out /tmp/a.npy > /dev/null 2>&1
  KILN_CUDA_QWG_SLICE=320 timeout 60 /tmp/k/kiln logits /tmp/s/$m --backend cuda --ids "$(seq -s, 10 209)" --chunk 200 --out /tmp/b.npy > /dev/null 2>&1
  python3 -c "import numpy as n; a=n.load('/tmp/a.npy'); b=n.load('/tmp/b.npy'); print('logits $m chunk 200: max|d|/max|a| %.3g, argmax equal %d of %d' % (abs(a-b).max()/abs(a).max(), (a.argmax(1)==b.argmax(1)).sum(), a.shape[0]))" >> "$S" 2>&1
done
call_prefill_ab "l8q4 l8q8 q06q4" "65 128 192 256 320" X=1 KILN_CUDA_QWG_SLICE=320
call_conc128 l8q4 kiln X=1 "--max-batch 128 --kv-cache-gb 16"
call_conc128 l8q4 kiln KILN_CUDA_QWG_SLICE=320 "--max-batch 128 --kv-cache-gb 16"
echo "all done at $(el) s" >> "$S"
cat "$S" $OUT/bench.txt
